"""Paired significance over per-query scores: scipy's paired t-test, a paired randomisation test, a bootstrap CI.

IR papers report both a parametric and a distribution-free test (Smucker, Allan & Carterette, CIKM 2007); the
randomisation test flips the sign of each query's difference, the bootstrap resamples queries.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class PairedTest:
    """Run B minus run A on the same queries; p-values are two-sided; ``None`` where a test is undefined."""

    queries: int
    mean_a: float
    mean_b: float
    delta: float
    t_statistic: float | None
    t_p_value: float | None
    randomization_p_value: float
    bootstrap_ci_low: float
    bootstrap_ci_high: float
    wins: int
    ties: int
    losses: int
    resamples: int
    seed: int
    confidence: float = 0.95

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# Resamples are drawn in batches of this many, so memory stays O(batch x queries) whatever ``resamples`` is.
BATCH = 10_000


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def _mean_difference(b: np.ndarray, a: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(b - a, axis=axis)


def paired_test(
    a: np.ndarray, b: np.ndarray, *, resamples: int = 10_000, seed: int = 0, confidence: float = 0.95, tie: float = 1e-9
) -> PairedTest:
    """Compare per-query scores ``b`` against ``a`` (same query order).

    The t-test is ``scipy.stats.ttest_rel``; it is undefined (``None``) when every difference is the same.
    The randomisation test is ``scipy.stats.permutation_test`` with paired (``samples``) permutations of the mean
    difference; the confidence interval is the percentile bootstrap of the mean difference.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or len(a) < 2:
        raise ValueError(f"need two equally long score lists of at least 2 queries, got {a.shape} and {b.shape}")
    diff = b - a
    t_statistic = t_p_value = None
    if np.ptp(diff) > 0:
        t_test = stats.ttest_rel(b, a)
        t_statistic, t_p_value = _finite(t_test.statistic), _finite(t_test.pvalue)
    randomization = stats.permutation_test(
        (b, a),
        _mean_difference,
        permutation_type="samples",
        vectorized=True,
        n_resamples=resamples,
        batch=BATCH,
        rng=np.random.default_rng(seed),
    )
    if np.ptp(diff) > 0:
        interval = stats.bootstrap(
            (diff,),
            np.mean,
            n_resamples=resamples,
            confidence_level=confidence,
            method="percentile",
            batch=BATCH,
            rng=np.random.default_rng(seed),
        ).confidence_interval
        low, high = float(interval.low), float(interval.high)
    else:
        low = high = float(diff[0])
    return PairedTest(
        queries=len(a),
        mean_a=float(a.mean()),
        mean_b=float(b.mean()),
        delta=float(diff.mean()),
        t_statistic=t_statistic,
        t_p_value=t_p_value,
        randomization_p_value=float(randomization.pvalue),
        bootstrap_ci_low=low,
        bootstrap_ci_high=high,
        wins=int((diff > tie).sum()),
        ties=int((np.abs(diff) <= tie).sum()),
        losses=int((diff < -tie).sum()),
        resamples=resamples,
        seed=seed,
        confidence=confidence,
    )
