"""Token-budget batching covers every text once, longest first, within the padded-token budget."""

from __future__ import annotations

import numpy as np

from embedkit.models.batching import token_budget_batches


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
