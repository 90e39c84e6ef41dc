"""New parameters start from the run's seed: a training run is reproducible only if the heads it adds to a start
model (an MLM head, a token projection, a cross-encoder's logit) are drawn from a seeded generator. The Trainer seeds
torch when it is built, which is after the model is."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """torch's CPU generator seeded with ``seed`` inside, and the host's generator as it was afterwards."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
