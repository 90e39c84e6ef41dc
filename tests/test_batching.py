"""Token-budget batching covers every text once, longest first, within the padded-token budget; its features are
the model's own."""

from __future__ import annotations

import numpy as np
import torch

from embedkit.data import doc_text
from embedkit.models.batching import TextBatcher, token_budget_batches


def test_batches_partition_and_respect_budget():
    lengths = np.random.default_rng(0).integers(1, 300, size=1000)
    batches = list(token_budget_batches(lengths, budget=2048, max_batch=64))
    seen = np.concatenate(batches)
    assert sorted(seen.tolist()) == list(range(1000))
    assert np.all(np.diff(lengths[seen]) <= 0)
    for batch in batches:
        assert len(batch) <= 64
        assert len(batch) == 1 or len(batch) * lengths[batch].max() <= 2048


def test_one_text_longer_than_budget_still_gets_a_batch():
    batches = list(token_budget_batches(np.array([5000, 3]), budget=100))
    assert [b.tolist() for b in batches] == [[0], [1]]


def test_batches_are_what_tokenizing_each_batch_alone_gives(default_model, scifact):
    """Tokenized once per chunk and cut per batch, every batch's features equal the model's own ``preprocess`` of
    that batch's texts: ids, mask and token types, with and without a prompt, for empty and one-word texts too."""
    texts = [doc_text(doc) for doc in scifact.corpus.select(range(200))] + ["", "a", "one short text"]
    batcher = TextBatcher.of(default_model, weightless=False)
    for prompt in ("", "query: "):
        seen = []
        for rows, features in batcher.batches(texts, prompt):
            alone = batcher.input_module.preprocess([texts[i] for i in rows], prompt=prompt or None)
            assert features.keys() == alone.keys()
            for key, value in alone.items():
                assert torch.equal(features[key], value) if isinstance(value, torch.Tensor) else features[key] == value
            seen.extend(rows.tolist())
        assert sorted(seen) == list(range(len(texts)))
