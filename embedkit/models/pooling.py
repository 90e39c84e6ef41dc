"""The two sentence vectors pretraining and its evaluation compute by hand (sentence-transformers' ``Pooling`` module
does the same inside a model stack): [CLS], or the mean over every non-padding position."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # tensor methods only: the settings that import SENTENCE_POOLINGS stay free of torch
    import torch

SENTENCE_POOLINGS = ("cls", "mean")


def sentence_vector(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """(batch, length, dim) token states to (batch, dim): ``cls`` or ``mean`` (padding left out)."""
    if pooling == "cls":
        return hidden[:, 0]
    if pooling != "mean":
        raise ValueError(f"unknown sentence pooling '{pooling}' ({' | '.join(SENTENCE_POOLINGS)})")
    weights = attention_mask[..., None].to(hidden.dtype)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
