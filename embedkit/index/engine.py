"""What every index engine's folder shares: ``meta.json`` naming its format and engine and listing its files with
their sha256 (verified before a byte is read), and one refusal for a filter an engine cannot apply."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, ClassVar

from embedkit.errors import EmbedkitError
from embedkit.index.registry import read_meta, record_files, verify_files
from embedkit.outputs import replace_folder
from embedkit.storage import read_lines, write_json
from embedkit.validation import check_whole


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


class ProbedSearch:
    """``nprobe`` and ``candidates``: the search parameters the approximate multi-vector engines share (their
    dataclass fields), read and set together."""

    nprobe: int
    candidates: int

    @property
    def search_params(self) -> dict[str, int]:
        return {"nprobe": self.nprobe, "candidates": self.candidates}

    def set_search_params(self, nprobe: int | None = None, candidates: int | None = None) -> None:
        check_whole(nprobe, "nprobe", minimum=1)
        check_whole(candidates, "candidates", minimum=1)
        self.nprobe = nprobe or self.nprobe
        self.candidates = candidates or self.candidates


class LibraryFolder:
    """What an engine whose folder another library writes once and never changes (Lucene, Seismic) shares: opened
    by its constructor, saved by copying the folder, its ids in a ``docid`` file, its rows not kept (a living index
    takes them from the embeddings folder); ``from_rows`` builds into a scratch folder removed with the object."""

    folder: Path
    meta: dict[str, Any]
    output_kind: ClassVar[str] = "sparse-index"

    @classmethod
    def open(cls, folder: str | Path) -> Any:
        return cls(folder)

    def __len__(self) -> int:
        return int(self.meta["documents"])

    @property
    def settings(self) -> dict[str, Any]:
        """The settings of the model whose rows the index holds."""
        return self.meta["settings"]

    @property
    def model_settings(self) -> dict[str, Any]:
        return self.meta["settings"]

    @property
    def doc_ids(self) -> list[str] | None:
        """Each row's id (None for a folder written before they were recorded)."""
        path = self.folder / "docid"
        return read_lines(path) if path.is_file() else None

    ids = doc_ids

    def stored_rows(self) -> None:
        return None

    def save(self, path: str | Path, overwrite: bool = False) -> Path:
        with replace_folder(path, self.output_kind, overwrite) as staging:
            self.write_files(staging)
        return Path(path)

    def write_files(self, staging: Path) -> None:
        shutil.copytree(self.folder, staging, dirs_exist_ok=True)

    @classmethod
    def in_scratch(cls, build: Any, *args: Any) -> Any:
        """``build(folder)`` into a scratch folder, opened with ``args``; the folder goes with the object."""
        scratch = tempfile.TemporaryDirectory(prefix=f"embedkit-{cls.__name__.lower()}-")
        build(Path(scratch.name) / "index")
        built = cls(Path(scratch.name) / "index", *args)
        built.scratch = scratch
        return built
