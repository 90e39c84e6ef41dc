"""A file written by ``embedkit mine``: JSONL records and a ``<file>.meta.json`` sidecar that marks it (read
without torch) and pairs itself with the records by their sha256."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from embedkit.errors import EmbedkitError
from embedkit.outputs import check_output_file, output_lock
from embedkit.storage import read_json, sha256_file, write_json, write_lines

MINED_FORMAT = "embedkit.mined/1"


def meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".meta.json")


def is_mined_file(path: Path) -> bool:
    """Whether ``path`` was written by ``write_mined`` (so ``--overwrite`` may replace it)."""
    try:
        return read_json(meta_path(path)).get("format") == MINED_FORMAT
    except (EmbedkitError, AttributeError):
        return False


def write_mined_file(path: Path, records: list[dict[str, Any]], meta: dict[str, Any], overwrite: bool) -> Path:
    """Records and sidecar, under the folder's lock; an existing file is replaced only when it is an earlier mined
    file and ``overwrite`` says so."""
    with output_lock(path):
        check_output_file(path, overwrite, is_mined_file, "mined-negatives file")
        write_lines(path, (json.dumps(r, ensure_ascii=False) for r in records))
        write_json(meta_path(path), {**meta, "format": MINED_FORMAT, "jsonl_sha256": sha256_file(path)})
    return path
