"""Matryoshka representation learning (Kusupati et al., 2022): the loss summed over nested embedding prefixes.

sentence-transformers' ``MatryoshkaLoss`` wraps any inner loss and evaluates it on the first 384, 256, 128, 64 ...
dimensions, so the truncated embeddings stay useful on their own.
"""

from __future__ import annotations

from collections.abc import Sequence

from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.losses import MatryoshkaLoss
from torch import nn

from embedkit.errors import EmbedkitError


def matryoshka(
    model: SentenceTransformer, inner: nn.Module, dims: Sequence[int], weights: Sequence[float] | None = None
) -> MatryoshkaLoss:
    full = model.get_embedding_dimension()
    if any(d > full or d <= 0 for d in dims):
        raise EmbedkitError(f"Matryoshka dimensions {list(dims)} must lie in 1..{full}", field="matryoshka_dims")
    return MatryoshkaLoss(model, inner, matryoshka_dims=list(dims), matryoshka_weights=weights)
