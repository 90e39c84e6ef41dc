"""Exact scoring from the float vectors: re-scoring a compressed index's candidates, and exact top-k for tuning.

The float vectors (``Vectors``) are read memory-mapped, shard file by shard file, so a corpus whose float vectors do
not fit in RAM can still re-score the few candidates per query that an SQ8 or binary index returns.
"""

from __future__ import annotations

import numpy as np

from embedkit.errors import EmbedkitError
from embedkit.index.vectors import Vectors

# Floats materialised at once when gathering candidate vectors or scoring a block (bounds the memory used).
_BLOCK_FLOATS = 32 * 1024 * 1024


def _worst(metric: str) -> float:
    return -np.inf if metric == "ip" else np.inf


def _order(scores: np.ndarray, metric: str, k: int | None = None) -> np.ndarray:
    """The best ``k`` columns per row, best first (stable, so ties keep the earlier column)."""
    keys = -scores if metric == "ip" else scores
    if k is None or k >= keys.shape[1]:
        return np.argsort(keys, axis=1, kind="stable")[:, :k]
    top = np.sort(np.argpartition(keys, k - 1, axis=1)[:, :k], axis=1)
    return np.take_along_axis(top, np.argsort(np.take_along_axis(keys, top, axis=1), axis=1, kind="stable"), axis=1)


def rescore(
    queries: np.ndarray, candidates: np.ndarray, vectors: Vectors, k: int, metric: str = "ip"
) -> tuple[np.ndarray, np.ndarray]:
    """Exact scores of each query's candidate rows (``-1`` = none), re-ranked: the top ``k`` scores and rows.

    ``ip`` scores are inner products (larger is better), ``l2`` scores squared distances (smaller is better), as
    FAISS reports them.
    """
    if queries.shape[1] != vectors.dim:
        raise EmbedkitError(f"the float vectors have dimension {vectors.dim}, the queries {queries.shape[1]}")
    count, width = candidates.shape
    k = min(k, width)
    scores = np.full((count, k), _worst(metric), dtype=np.float32)
    rows = np.full((count, k), -1, dtype=np.int64)
    step = max(1, _BLOCK_FLOATS // max(1, width * vectors.dim))
    for start in range(0, count, step):
        block = candidates[start : start + step]
        valid = block >= 0
        unique, inverse = np.unique(block[valid], return_inverse=True)
        gathered = vectors.gather(unique)
        cand = np.zeros((*block.shape, vectors.dim), dtype=np.float32)
        cand[valid] = gathered[inverse]
        q = queries[start : start + step]
        exact = np.einsum("qd,qcd->qc", q, cand)
        if metric == "l2":
            exact = (q * q).sum(1, keepdims=True) - 2 * exact + (cand * cand).sum(2)
        exact[~valid] = _worst(metric)
        order = _order(exact, metric, k)
        scores[start : start + step] = np.take_along_axis(exact, order, axis=1)
        rows[start : start + step] = np.where(
            np.take_along_axis(valid, order, axis=1), np.take_along_axis(block, order, axis=1), -1
        )
    return scores, rows


def exact_search(queries: np.ndarray, vectors: Vectors, k: int, metric: str = "ip") -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` scores and rows, streaming the vectors block by block (the ground truth of tuning)."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    k = min(k, len(vectors))
    best_scores = np.full((len(queries), k), _worst(metric), dtype=np.float32)
    best_rows = np.full((len(queries), k), -1, dtype=np.int64)
    rows_per_block = max(k, _BLOCK_FLOATS // 4 // max(1, len(queries)))
    for first, block in vectors.batches(0, len(vectors), rows_per_block):
        scores = queries @ block.T
        if metric == "l2":
            scores = (queries * queries).sum(1, keepdims=True) - 2 * scores + (block * block).sum(1)
        merged_scores = np.concatenate([best_scores, scores], axis=1)
        block_rows = np.broadcast_to(np.arange(first, first + len(block)), scores.shape)
        merged_rows = np.concatenate([best_rows, block_rows], axis=1)
        order = _order(merged_scores, metric, k)
        best_scores = np.take_along_axis(merged_scores, order, axis=1)
        best_rows = np.take_along_axis(merged_rows, order, axis=1)
    return best_scores, best_rows
