"""Token-budget batching covers every text once, longest first, within the padded-token budget; its features are
the model's own; its budget follows the machine's load."""

from __future__ import annotations

import time

import numpy as np
import torch

from embedkit.data import doc_text
from embedkit.models.batching import TextBatcher, token_budget_batches
from embedkit.models.load_budget import LOADED_TOKENS, LoadBudget


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


def test_budget_read_before_each_batch():
    """A callable budget (``LoadBudget.tokens``) is read per batch: a budget that grows midway makes later batches
    larger, and every text is still covered once."""
    lengths = np.full(100, 10)
    budgets = iter([20, 20, 200, 200, 200, 200, 200, 200, 200])
    batches = list(token_budget_batches(lengths, budget=lambda: next(budgets), max_batch=64))
    assert [len(b) for b in batches] == [2, 2, 20, 20, 20, 20, 16]
    assert sorted(np.concatenate(batches).tolist()) == list(range(100))


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


def test_load_budget_measures_this_process_cpu_share():
    """The share is real: a batch that sleeps (no CPU, as when other processes hold the cores) measures near 0 and
    marks the machine contended; one that computes on its thread measures far more; one thread never adapts."""
    budget = LoadBudget.for_threads(4096, threads=2, adaptive=True)
    with budget.measure():
        time.sleep(0.2)
    assert budget.last_share < 0.1 and budget.contended and budget.tokens() == LOADED_TOKENS
    with budget.measure():
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:
            pass
    assert budget.last_share > 0.25  # one busy thread of two: 0.5 on a free machine
    single = LoadBudget.for_threads(4096, threads=1, adaptive=True)
    with single.measure():
        time.sleep(0.05)
    assert not single.adaptive and single.last_share is None and single.tokens() == 4096


def test_load_budget_has_a_gap_and_stays_fixed_when_asked_for():
    budget = LoadBudget(base=4096, threads=2, adaptive=True)
    budget.observe(0.75)
    assert not budget.contended  # above the contended mark
    budget.observe(0.5)
    budget.observe(0.8)
    assert budget.contended  # not yet above the free mark
    budget.observe(0.95)
    assert not budget.contended
    fixed = LoadBudget(base=2048, threads=2, adaptive=False)
    with fixed.measure():
        time.sleep(0.05)
    assert fixed.tokens() == 2048
