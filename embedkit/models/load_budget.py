"""A token budget that follows the machine's load: large batches while other processes take the cores.

Measured here (RESULTS.md): on an idle machine 4,096-token batches are as fast as any, but with two busy processes on
the two cores they ran at 0.59-0.86x of sentence-transformers at batch 128 and 32,768-token batches at 0.89-1.07x
(500 documents, two runs); ``benchmarks/encode.py --load 2`` went from 0.93x to 1.04x with this budget. Every torch
operator ends at a barrier of all its threads, and a thread that waits for a core stalls the others, once per
operator, so many small batches lose most. The signal is this process's own
CPU share: CPU seconds over wall seconds per thread, near 1 when every thread has a core, near 0.5 when they share.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

LOADED_TOKENS = 32768  # the budget while contended: 128 texts of 256 tokens
CONTENDED_BELOW = 0.7  # CPU share per thread under which the machine counts as contended ...
FREE_ABOVE = 0.85  # ... and over which it counts as free again (a gap, so one noisy batch does not flip it)


@dataclass
class LoadBudget:
    """``tokens()`` for the next batch; ``measure()`` around each forward pass updates it.

    Fixed (``adaptive=False``) when the budget was asked for explicitly or torch runs one thread (``for_threads``):
    one thread has no barrier to stall, and the test suite (one thread per process) keeps its batches deterministic.
    """

    base: int
    threads: int
    adaptive: bool
    contended: bool = False
    last_share: float | None = None

    @classmethod
    def for_threads(cls, base: int, threads: int, adaptive: bool) -> LoadBudget:
        return cls(base, threads, adaptive=adaptive and threads > 1)

    def tokens(self) -> int:
        return max(self.base, LOADED_TOKENS) if self.contended else self.base

    @contextmanager
    def measure(self) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if self.adaptive and wall > 0:
            self.observe(cpu / (wall * self.threads))

    def observe(self, share: float) -> None:
        self.last_share = share
        self.contended = share < (FREE_ABOVE if self.contended else CONTENDED_BELOW)
