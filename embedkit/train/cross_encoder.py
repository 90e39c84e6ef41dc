"""Training a reranker: a sentence-transformers ``CrossEncoder`` fitted by its own ``CrossEncoderTrainer`` and
losses, on the rows embedkit's bi-encoders train on (a query, its positive and mined negatives).

- ``bce``: ``BinaryCrossEntropyLoss`` over (query, document, 1 or 0) pairs, the positive weighted by the number of
  negatives per query (sentence-transformers' advice for hard-negative data).
- ``listnet`` / ``lambdaloss``: ``ListNetLoss`` / ``LambdaLoss`` over (query, [positive, negatives...], [1, 0...]).

The network starts from any BERT-like folder (offline: the default model's encoder, given a new one-logit head).
"""

from __future__ import annotations

import datasets
import torch
from sentence_transformers.cross_encoder import CrossEncoder, CrossEncoderTrainer, CrossEncoderTrainingArguments
from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss, LambdaLoss, ListNetLoss
from torch import nn

from embedkit.errors import EmbedkitError
from embedkit.models.options import check_max_length, stack_limit
from embedkit.models.reference import resolve_model, weights_sha256

__all__ = [
    "CrossEncoderTrainer",
    "CrossEncoderTrainingArguments",
    "cross_encoder_examples",
    "cross_encoder_loss",
    "load_cross_encoder",
    "negative_columns",
]


def load_cross_encoder(name: str | None, max_length: int | None) -> tuple[CrossEncoder, dict]:
    """The network to train (one logit per pair) and what the record says it started from."""
    reference = resolve_model(name)
    model = CrossEncoder(str(reference.path), num_labels=1, max_length=max_length)
    check_max_length(max_length, stack_limit(model), path=reference.path)
    started = {
        "model": reference.name,
        "weights_sha256": weights_sha256(reference.path) if reference.path.is_dir() else None,
        "max_length": int(model.max_length),
    }
    return model, started


def negative_columns(examples: datasets.Dataset) -> list[str]:
    return [name for name in examples.column_names if name.startswith("negative_")]


def cross_encoder_examples(examples: datasets.Dataset, loss: str) -> datasets.Dataset:
    """Rows ``anchor, positive, negative_1..n`` as the loss reads them (pairs for bce, lists for the listwise)."""
    negatives = negative_columns(examples)
    if not negatives:
        raise EmbedkitError("a cross-encoder learns from negatives; the training rows have none", field="data")
    if loss == "bce":
        queries, documents, labels = [], [], []
        for row in examples:
            for column, label in (("positive", 1.0), *((name, 0.0) for name in negatives)):
                queries.append(row["anchor"])
                documents.append(row[column])
                labels.append(label)
        return datasets.Dataset.from_dict({"query": queries, "document": documents, "label": labels})
    return datasets.Dataset.from_dict(
        {
            "query": examples["anchor"],
            "docs": [[row["positive"], *(row[name] for name in negatives)] for row in examples],
            "labels": [[1.0] + [0.0] * len(negatives) for _ in range(len(examples))],
        }
    )


def cross_encoder_loss(model: CrossEncoder, name: str, num_negatives: int) -> nn.Module:
    if name == "bce":
        return BinaryCrossEntropyLoss(model, pos_weight=torch.tensor(float(num_negatives)))
    if name == "listnet":
        return ListNetLoss(model)
    if name == "lambdaloss":
        return LambdaLoss(model)
    raise EmbedkitError(f"unknown cross-encoder loss '{name}' (bce | listnet | lambdaloss)", field="loss")
