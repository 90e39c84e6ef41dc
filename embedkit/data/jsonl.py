"""Reading text data files line by line, naming the file, line and field of anything that cannot be read exactly.

Every reader of user data goes through ``read_lines_of`` (bytes, gzip by its magic number, UTF-8 checked per line,
a leading byte-order mark accepted) and checks ids with ``check_id``, so an id that would corrupt a TREC file or a
``docid`` file is refused where it is read, not discovered stages later.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from embedkit.errors import EmbedkitError
from embedkit.validation import check_id, check_text

GZIP_MAGIC = b"\x1f\x8b"
BOM = "\ufeff"


def require_file(path: Path) -> None:
    if not Path(path).is_file():
        raise EmbedkitError("no such file", path=path)


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(2) == GZIP_MAGIC


def read_lines_of(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of every line, without its line ending; a leading BOM is dropped.

    A ``.gz`` file must be gzip and any other file must not be: a mismatch is an error, as is a line that is not
    UTF-8 or a truncated gzip stream. Lines are split on ``\\n`` only, so a ``\\u2028`` inside JSON text stays put.
    """
    path = Path(path)
    require_file(path)
    compressed = _is_gzip(path)
    if path.suffix == ".gz" and not compressed:
        raise EmbedkitError("named .gz but not gzip-compressed", path=path)
    if compressed and path.suffix != ".gz":
        raise EmbedkitError(f"gzip-compressed data in a file not named .gz; rename it to {path.name}.gz", path=path)
    opener = gzip.open if compressed else open
    number = 0
    try:
        with opener(path, "rb") as handle:
            for number, raw in enumerate(handle, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    message = f"not UTF-8 (byte {err.start + 1} of the line)"
                    raise EmbedkitError(message, path=path, line=number) from None
                if number == 1 and line.startswith(BOM):
                    line = line[1:]
                yield number, line.rstrip("\n").removesuffix("\r")
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise EmbedkitError(f"truncated or corrupt gzip data ({err})", path=path, line=number + 1) from None


def read_records(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, record)`` of a JSONL file; blank lines are skipped.

    Refused with the file, line and field: malformed JSON, a line that is not an object, a missing required field, an
    ``_id`` that is not a valid id (``check_id``), a ``title``/``text`` that is not a string (null counts as missing
    where the field is required).
    """
    for number, line in read_lines_of(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise EmbedkitError(f"malformed JSON at column {err.colno}: {err.msg}", path=path, line=number) from None
        except RecursionError:
            raise EmbedkitError("JSON nested too deeply", path=path, line=number) from None
        if not isinstance(record, dict):
            raise EmbedkitError("expected a JSON object", path=path, line=number)
        for field in required:
            if field not in record:
                raise EmbedkitError("missing", path=path, line=number, field=field)
        if "_id" in record:
            record["_id"] = check_id(record["_id"], path, number, "_id")
        for field in ("title", "text"):
            if field in record:
                record[field] = check_text(record[field], path, number, field, required=field in required)
        yield number, record


def find_file(folder: Path, stem: str) -> Path:
    """``stem.jsonl`` or ``stem.jsonl.gz`` inside ``folder``."""
    for name in (f"{stem}.jsonl", f"{stem}.jsonl.gz"):
        if (folder / name).is_file():
            return folder / name
    raise EmbedkitError(f"no {stem}.jsonl or {stem}.jsonl.gz in this folder", path=folder)
