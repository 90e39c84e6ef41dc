"""Line-by-line JSONL reading that names the file, line and field of any bad record."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from embedkit.errors import EmbedkitError


def open_text(path: Path):
    """Open a plain or gzip-compressed text file for reading."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def read_records(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, record)``; raise on malformed JSON or a missing/ill-typed required field."""
    require_file(path)
    with open_text(path) as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise EmbedkitError(
                    f"malformed JSON at column {err.colno}: {err.msg}", path=path, line=number
                ) from None
            if not isinstance(record, dict):
                raise EmbedkitError("expected a JSON object", path=path, line=number)
            for field in required:
                if field not in record:
                    raise EmbedkitError("missing", path=path, line=number, field=field)
            record_id = record.get("_id")
            if isinstance(record_id, int):
                record["_id"] = str(record_id)
            elif record_id is not None and not isinstance(record_id, str):
                raise EmbedkitError("must be a string", path=path, line=number, field="_id")
            for field in ("title", "text"):
                value = record.get(field)
                if value is not None and not isinstance(value, str):
                    raise EmbedkitError("must be a string", path=path, line=number, field=field)
            yield number, record


def require_file(path: Path) -> None:
    if not Path(path).is_file():
        raise EmbedkitError("no such file", path=path)


def find_file(folder: Path, stem: str) -> Path:
    """``stem.jsonl`` or ``stem.jsonl.gz`` inside ``folder``."""
    for name in (f"{stem}.jsonl", f"{stem}.jsonl.gz"):
        if (folder / name).is_file():
            return folder / name
    raise EmbedkitError(f"no {stem}.jsonl or {stem}.jsonl.gz in this folder", path=folder)
