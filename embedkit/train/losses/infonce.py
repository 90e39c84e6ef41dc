"""InfoNCE with in-batch and hard negatives (van den Oord et al., 2018; Karpukhin et al., 2020, DPR).

sentence-transformers' ``MultipleNegativesRankingLoss`` is exactly this loss: each query is scored against its own
positive, its own hard negatives and every other document in the batch, with ``scale = 1 / temperature``; the
``doc_to_query`` direction gives the symmetric term. embedkit adds only a learned temperature (as in CLIP,
Radford et al., 2021), which that class lacks.
"""

from __future__ import annotations

import math

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
from torch import nn


def directions(symmetric: bool) -> tuple[str, ...]:
    return ("query_to_doc", "doc_to_query") if symmetric else ("query_to_doc",)


class LearnedTemperatureInfoNCE(MultipleNegativesRankingLoss):
    """InfoNCE whose temperature is a trained parameter (log-parametrised, capped at ``max_scale``)."""

    def __init__(
        self, model: SentenceTransformer, temperature: float = 0.05, max_scale: float = 100.0, **kwargs
    ) -> None:
        super().__init__(model, scale=1.0 / temperature, **kwargs)
        self.log_scale = nn.Parameter(torch.tensor(math.log(1.0 / temperature)))
        self.max_scale = max_scale

    def compute_loss_from_embeddings(self, embeddings, labels):
        self.scale = self.log_scale.exp().clamp(max=self.max_scale)
        return super().compute_loss_from_embeddings(embeddings, labels)

    @property
    def temperature(self) -> float:
        return float(1.0 / self.log_scale.detach().exp().clamp(max=self.max_scale))


def infonce(
    model: SentenceTransformer,
    temperature: float = 0.05,
    symmetric: bool = False,
    learn_temperature: bool = False,
    gather_across_devices: bool = False,
) -> MultipleNegativesRankingLoss:
    """In-batch + hard-negative InfoNCE at a fixed or learned temperature."""
    kwargs = {"directions": directions(symmetric), "gather_across_devices": gather_across_devices}
    if learn_temperature:
        return LearnedTemperatureInfoNCE(model, temperature=temperature, **kwargs)
    return MultipleNegativesRankingLoss(model, scale=1.0 / temperature, **kwargs)
