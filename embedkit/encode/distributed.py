"""Encoding under ``torchrun``: each rank encodes its block of the global shards, then rank 0 merges the parts.

The ranks only need to agree on when every part is written, so they synchronise with a gloo barrier (CPU-side, no
tensors) whatever device they encode on: NCCL would bind each rank to a distinct GPU and add a watchdog timeout for
no benefit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from embedkit.encode.folder import EmbeddingsFolder
from embedkit.encode.workers import merge_encoded_parts
from embedkit.encode.writer import encode_to_folder
from embedkit.models.embedding_model import EmbeddingModel

# Blocks hold the same number of shards but not of tokens, so ranks can finish far apart; the barrier must outwait
# the slowest one (a rank that dies makes torchrun stop the others long before this).
BARRIER_TIMEOUT = timedelta(hours=24)


@dataclass(frozen=True)
class Launch:
    """Where this process sits in a ``torchrun`` launch."""

    rank: int
    world_size: int
    local_rank: int

    def device(self, requested: str | None) -> str | None:
        """``cuda:LOCAL_RANK`` when the run goes to CUDA, so the ranks on a node do not share one GPU."""
        import torch

        if requested not in (None, "cuda") or not torch.cuda.is_available():
            return requested
        return f"cuda:{self.local_rank % torch.cuda.device_count()}"


def torchrun_launch() -> Launch | None:
    """The launch ``torchrun`` describes in the environment, or None for a single process."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1 or "RANK" not in os.environ:
        return None
    return Launch(int(os.environ["RANK"]), world_size, int(os.environ.get("LOCAL_RANK", "0")))


def encode_across_ranks(
    model: EmbeddingModel,
    corpus: Any,
    folder: str | Path,
    launch: Launch,
    shard_size: int = 10_000,
    overwrite: bool = False,
    show_progress: bool | None = None,
) -> EmbeddingsFolder:
    """Encode this rank's block (``worker_id=RANK``, ``num_workers=WORLD_SIZE``); after a barrier rank 0 merges.

    Rank 0 returns the merged folder, the other ranks their part. A process group that is already initialised (a
    caller's own distributed script) is used as it is and left open.
    """
    import torch.distributed as dist

    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group("gloo", timeout=BARRIER_TIMEOUT)
    result = encode_to_folder(
        model,
        corpus,
        folder,
        shard_size=shard_size,
        overwrite=overwrite,
        show_progress=show_progress if launch.rank == 0 else False,
        worker_id=launch.rank,
        num_workers=launch.world_size,
        merge=False,
    )
    dist.barrier()
    if launch.rank == 0:
        merged = merge_encoded_parts(folder, num_workers=launch.world_size)
        result = EmbeddingsFolder(path=merged.path, manifest=merged.manifest, encoded_shards=result.encoded_shards)
    if owned:
        dist.destroy_process_group()
    return result
