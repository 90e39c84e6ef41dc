"""Cross-device negatives: under ``torchrun``, every query is scored against every document of the global batch.

sentence-transformers' InfoNCE losses take ``gather_across_devices=True``: queries and documents are all-gathered with
gradients, each rank scores its own queries against all gathered documents, and each query stays aligned with its own
positive and hard negatives through a rank offset. The effective number of negatives grows with the world size, as
in DPR/ANCE-style distributed training (Karpukhin et al., 2020; Xiong et al., 2021). This module chooses it
automatically: on whenever ``torch.distributed`` is initialised with more than one process.
"""

from __future__ import annotations

import torch.distributed as dist


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
