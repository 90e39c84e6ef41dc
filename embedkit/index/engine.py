"""What every index engine's folder shares: ``meta.json`` naming its format and engine and listing its files with
their sha256 (verified before a byte is read), and one refusal for a filter an engine cannot apply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedkit.errors import EmbedkitError
from embedkit.index.registry import read_meta, record_files, verify_files
from embedkit.storage import write_json


def write_meta(staging: Path, meta: dict[str, Any]) -> None:
    """``meta.json`` in a staged folder, with the sha256 of every other file in it."""
    write_json(staging / "meta.json", {**meta, "files": record_files(staging)})


def open_meta(folder: str | Path, format: str, engine: str, required: tuple[str, ...], what: str) -> dict[str, Any]:
    """A folder's ``meta.json`` after checking it names ``format`` and ``engine`` and its files are whole."""
    folder = Path(folder)
    if not folder.is_dir():
        raise EmbedkitError("no such index folder", path=folder)
    meta = read_meta(folder)
    if meta.get("format") != format or meta.get("engine") != engine:
        raise EmbedkitError(f"not {what} (meta.json)", path=folder, field="--index")
    verify_files(folder, meta, required)
    return meta


def refuse_filter(filter: str | None, engine: str) -> None:
    """A metadata filter needs a store of metadata: a living index (``LiveIndex``) has one."""
    if filter is not None:
        raise EmbedkitError(
            f"the {engine} index holds no metadata to filter by; open it for updates first (embedkit index add)",
            field="filter",
        )


def check_family(embeddings: Any, family: str) -> None:
    """An embeddings folder holds the rows an engine of ``family`` indexes (``embedkit.rows``)."""
    held = embeddings.row_format.kind
    if held != family:
        raise EmbedkitError(f"holds {held} rows; a {family} index needs a {family} model's embeddings",
                            path=embeddings.path, field="--embeddings")  # fmt: skip
