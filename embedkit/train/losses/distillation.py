"""Listwise distillation: KL divergence between the student's and the teacher's score distributions over a query's
candidates (as in RocketQAv2, Ren et al., 2021, and Tevatron's distillation).

sentence-transformers' ``DistillKLDivLoss`` does this: each row is (query, positive, negatives...) with the teacher's
scores for those candidates as the label; both score lists are softmaxed at their temperatures.
"""

from __future__ import annotations

from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.losses import DistillKLDivLoss


def listwise_distillation(
    model: SentenceTransformer, temperature: float = 1.0, teacher_temperature: float | None = None
) -> DistillKLDivLoss:
    return DistillKLDivLoss(model, temperature=temperature, teacher_temperature=teacher_temperature)
