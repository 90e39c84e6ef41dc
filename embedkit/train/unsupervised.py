"""Positive pairs without labels, from a raw corpus.

- SimCSE (Gao et al., 2021): a text paired with itself; the two views differ only by dropout, which is active while
  training, so InfoNCE over such pairs teaches the encoder to ignore that noise.
- Independent cropping (Izacard et al., 2022, Contriever): two random spans of one document, each 10-50 % of its
  words, drawn independently, form a positive pair.
"""

from __future__ import annotations

from typing import Any

import datasets
import numpy as np

from embedkit.data.beir import doc_text


def _texts(corpus: Any, limit: int | None) -> list[str]:
    rows = corpus if limit is None else corpus.select(range(min(limit, len(corpus))))
    return [text for text in (doc_text(row) for row in rows) if text]


def simcse_pairs(corpus: Any, limit: int | None = None) -> datasets.Dataset:
    texts = _texts(corpus, limit)
    return datasets.Dataset.from_dict({"anchor": texts, "positive": texts})


def random_crop(words: list[str], rng: np.random.Generator, min_ratio: float, max_ratio: float) -> str:
    length = max(1, round(len(words) * rng.uniform(min_ratio, max_ratio)))
    start = int(rng.integers(0, len(words) - length + 1))
    return " ".join(words[start : start + length])


def cropping_pairs(
    corpus: Any, limit: int | None = None, min_ratio: float = 0.1, max_ratio: float = 0.5, seed: int = 0
) -> datasets.Dataset:
    rng = np.random.default_rng(seed)
    anchors, positives = [], []
    for text in _texts(corpus, limit):
        words = text.split()
        anchors.append(random_crop(words, rng, min_ratio, max_ratio))
        positives.append(random_crop(words, rng, min_ratio, max_ratio))
    return datasets.Dataset.from_dict({"anchor": anchors, "positive": positives})
