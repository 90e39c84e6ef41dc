"""Fusing runs (dense + BM25): reciprocal-rank fusion and normalised score interpolation, as pyserini fuses.

Both read each run's top ``depth`` hits per query and keep the best ``k``; a document missing from a run gets
nothing from it. Ties are broken by doc id descending, as trec_eval ranks (``embedkit.data.trec.TIE_BREAK``).
"""

from __future__ import annotations

from collections.abc import Sequence

from embedkit.data.trec import ranked
from embedkit.errors import EmbedkitError
from embedkit.protocols import Run

METHODS = ("rrf", "interpolation")


def _top(hits: dict[str, float], depth: int | None) -> list[tuple[str, float]]:
    return ranked(hits)[:depth] if depth else ranked(hits)


def _keep(scores: dict[str, float], k: int | None) -> dict[str, float]:
    ordered = ranked(scores)  # the cut keeps what trec_eval would rank first (ties: doc id descending)
    return dict(ordered[:k] if k else ordered)


def _weights(weights: Sequence[float] | None, count: int) -> list[float]:
    if weights is None:
        return [1.0 / count] * count
    if len(weights) != count:
        raise EmbedkitError(f"{len(weights)} fusion weights for {count} runs", field="fusion_weights")
    return [float(w) for w in weights]


def reciprocal_rank_fusion(
    runs: Sequence[Run], *, rrf_k: int = 60, depth: int | None = 1000, k: int | None = 1000
) -> Run:
    """Σ 1 / (rrf_k + rank) over runs (Cormack et al., SIGIR 2009); scores are ignored, only ranks count."""
    fused: Run = {}
    for query_id in {q for run in runs for q in run}:
        scores: dict[str, float] = {}
        for run in runs:
            for rank, (doc_id, _) in enumerate(_top(run.get(query_id, {}), depth), start=1):
                scores[doc_id] = scores.get(doc_id, 0.0) + 1.0 / (rrf_k + rank)
        fused[query_id] = _keep(scores, k)
    return fused


def min_max(hits: list[tuple[str, float]]) -> dict[str, float]:
    """Scores rescaled to [0, 1] per query; all ones when every score is equal (pyserini's rule)."""
    if not hits:
        return {}
    low, high = min(s for _, s in hits), max(s for _, s in hits)
    if high == low:
        return {d: 1.0 for d, _ in hits}
    return {d: (s - low) / (high - low) for d, s in hits}


def normalized_interpolation(
    runs: Sequence[Run], *, weights: Sequence[float] | None = None, depth: int | None = 1000, k: int | None = 1000
) -> Run:
    """Σ weight × min-max-normalised score: BM25 and cosine scores live on different scales, so rescale first."""
    weights = _weights(weights, len(runs))
    fused: Run = {}
    for query_id in {q for run in runs for q in run}:
        scores: dict[str, float] = {}
        for weight, run in zip(weights, runs):
            for doc_id, score in min_max(_top(run.get(query_id, {}), depth)).items():
                scores[doc_id] = scores.get(doc_id, 0.0) + weight * score
        fused[query_id] = _keep(scores, k)
    return fused


def fuse(
    runs: Sequence[Run],
    method: str = "rrf",
    *,
    weights: Sequence[float] | None = None,
    depth: int | None = 1000,
    k: int | None = 1000,
    rrf_k: int = 60,
) -> Run:
    """Fuse ``runs`` by ``method`` (``rrf`` or ``interpolation``)."""
    if len(runs) < 2:
        raise EmbedkitError(f"fusion needs at least two runs, got {len(runs)}")
    if method == "rrf":
        if weights is not None:
            raise EmbedkitError("reciprocal-rank fusion takes no weights", field="fusion_weights")
        return reciprocal_rank_fusion(runs, rrf_k=rrf_k, depth=depth, k=k)
    if method == "interpolation":
        return normalized_interpolation(runs, weights=weights, depth=depth, k=k)
    raise EmbedkitError(f"unknown fusion method '{method}' (choose from {', '.join(METHODS)})", field="fusion")
