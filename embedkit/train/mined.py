"""What marks a file written by ``embedkit mine``: its ``<file>.meta.json`` sidecar says so (read without torch)."""

from __future__ import annotations

from pathlib import Path

from embedkit.errors import EmbedkitError
from embedkit.storage import read_json

MINED_FORMAT = "embedkit.mined/1"


def meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".meta.json")


def is_mined_file(path: Path) -> bool:
    """Whether ``path`` was written by ``write_mined`` (so ``--overwrite`` may replace it)."""
    try:
        return read_json(meta_path(path)).get("format") == MINED_FORMAT
    except (EmbedkitError, AttributeError):
        return False
