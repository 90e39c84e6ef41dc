"""The layout of an embeddings folder, readable without torch: file names, worker blocks, what may be written.

A folder holds ``shard-NNNNN.npy`` (float32 vectors) and ``shard-NNNNN.docid`` (one id a line) per global shard,
and ``manifest.json`` (or, while workers share the encode, one ``manifest.part-i-of-n.json`` per worker), and
``encode-settings.json``: the settings every worker must share, so none overwrites another's shards.
"""

from __future__ import annotations

import re
from pathlib import Path

from embedkit.errors import EmbedkitError
from embedkit.outputs import check_parent
from embedkit.storage import is_litter

MANIFEST = "manifest.json"
FORMAT = "embedkit.embeddings/1"
# What every writer of the folder must share (settings, corpus, shard size), written before the first shard.
SETTINGS = "encode-settings.json"
SETTINGS_FORMAT = "embedkit.embeddings-settings/1"
PART_PATTERN = re.compile(r"manifest\.part-(\d+)-of-(\d+)\.json")


def part_name(worker_id: int, num_workers: int) -> str:
    """File name of worker ``worker_id``'s part manifest; zero-padded so a listing sorts in worker order."""
    return f"manifest.part-{worker_id:05d}-of-{num_workers:05d}.json"


def shard_block(total_shards: int, worker_id: int, num_workers: int) -> range:
    """The shard files worker ``worker_id`` of ``num_workers`` encodes: contiguous, sizes differ by at most 1."""
    return range(worker_id * total_shards // num_workers, (worker_id + 1) * total_shards // num_workers)


def check_worker(worker_id: int, num_workers: int) -> None:
    """Refuse a worker slice that does not exist (checked before any model or corpus is loaded)."""
    if num_workers < 1:
        raise EmbedkitError(f"must be at least 1, not {num_workers}", field="--num-workers")
    if not 0 <= worker_id < num_workers:
        message = f"must be in 0..{num_workers - 1} for --num-workers {num_workers}, not {worker_id}"
        raise EmbedkitError(message, field="--worker-id")


def check_embeddings_folder(folder: Path, flag: str = "--output") -> None:
    """An embeddings folder is written into place shard by shard, so it must be new, empty or one already."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise EmbedkitError(
            "exists and is not a folder; give a path for the embeddings folder", path=folder, field=flag
        )
    if not folder.exists():
        check_parent(folder, flag)
        return
    names = [entry.name for entry in folder.iterdir() if not is_litter(entry.name)]
    ours = MANIFEST in names or SETTINGS in names or any(PART_PATTERN.fullmatch(name) for name in names)
    if names and not ours:
        raise EmbedkitError(
            "holds files that are not embedkit embeddings; choose a new or empty folder", path=folder, field=flag
        )
