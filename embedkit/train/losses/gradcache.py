"""GradCache: the InfoNCE loss over a large batch computed in mini-batches (Gao et al., 2021, "Scaling Deep
Contrastive Learning Batch Size under Memory Limited Setup").

sentence-transformers' ``CachedMultipleNegativesRankingLoss`` implements it: embeddings are computed without a graph,
the loss and its gradient w.r.t. the embeddings are taken over the whole batch, then each mini-batch is re-encoded
with a graph and back-propagated with those cached gradients, so memory grows with the mini-batch, not the batch.
The result equals the plain loss (``tests/test_train_losses.py`` checks the loss and every gradient).
"""

from __future__ import annotations

from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss

from embedkit.train.losses.infonce import directions


def gradcache_infonce(
    model: SentenceTransformer,
    mini_batch_size: int = 32,
    temperature: float = 0.05,
    symmetric: bool = False,
    gather_across_devices: bool = False,
) -> CachedMultipleNegativesRankingLoss:
    return CachedMultipleNegativesRankingLoss(
        model,
        scale=1.0 / temperature,
        mini_batch_size=mini_batch_size,
        directions=directions(symmetric),
        gather_across_devices=gather_across_devices,
    )
