"""Exact scoring from the float vectors: re-scoring a compressed index's candidates, and exact top-k for tuning.

The float vectors are read from an embeddings folder memory-mapped, shard by shard, so a corpus whose float vectors
do not fit in RAM can still re-score the few candidates per query that an SQ8 or binary index returns.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.encode.folder import EmbeddingsFolder
from embedkit.errors import EmbedkitError

# Floats materialised at once when gathering candidate vectors or scoring a block (bounds the memory used).
_BLOCK_FLOATS = 32 * 1024 * 1024


class FloatVectors:
    """The float vectors of an index, row ``i`` = document ``i``: one in-memory array or memory-mapped shards."""

    def __init__(self, shards: list[np.ndarray], path: Path | None = None, folder: Any = None) -> None:
        if not shards:
            raise EmbedkitError("no float vectors to score with", path=path)
        dims = {int(s.shape[1]) for s in shards if s.ndim == 2}
        if len(dims) != 1 or any(s.ndim != 2 for s in shards):
            raise EmbedkitError("the float vectors must be 2-d shards of one dimension", path=path)
        self.shards = shards
        self.path = path
        self.folder = folder  # the EmbeddingsFolder read, if any (its ids can be checked against an index's)
        self.offsets = np.cumsum([0] + [len(s) for s in shards])
        self.dim = dims.pop()

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @classmethod
    def open(cls, source: Any) -> FloatVectors:
        """From an array, a ``FloatVectors``, an ``EmbeddingsFolder`` or an embeddings folder path (memory-mapped)."""
        if isinstance(source, FloatVectors):
            return source
        if isinstance(source, np.ndarray):
            if source.ndim != 2:
                raise EmbedkitError(f"the float vectors must be a 2-d array, got shape {source.shape}")
            return cls([source])
        if isinstance(source, (str, Path)):
            source = EmbeddingsFolder.open(source)
        if hasattr(source, "iter_shards") and hasattr(source, "manifest"):
            if not source.manifest.get("complete"):
                raise EmbedkitError("the embeddings are incomplete; rerun 'embedkit encode'", path=source.path)
            return cls([vectors for _, vectors in source.iter_shards()], path=Path(source.path), folder=source)
        raise EmbedkitError(f"cannot read float vectors from a {type(source).__name__}")

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """Float32 vectors of ``rows`` (non-negative row numbers), reading only those rows of each shard."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        if len(self.shards) == 1:
            out[:] = self.shards[0][rows]
            return out
        shard_of = np.searchsorted(self.offsets, rows, side="right") - 1
        for shard in np.unique(shard_of):
            mask = shard_of == shard
            out[mask] = self.shards[shard][rows[mask] - self.offsets[shard]]
        return out

    def blocks(self, rows_per_block: int) -> Iterator[tuple[int, np.ndarray]]:
        """``(first row, float32 block)`` over all vectors in order, at most ``rows_per_block`` rows at a time."""
        for offset, shard in zip(self.offsets, self.shards):
            for start in range(0, len(shard), rows_per_block):
                yield int(offset) + start, np.ascontiguousarray(shard[start : start + rows_per_block], dtype=np.float32)

    def sample(self, count: int, seed: int = 0) -> np.ndarray:
        """A seeded sample of ``count`` rows (all rows if fewer), in row order."""
        if count >= len(self):
            return self.gather(np.arange(len(self)))
        rows = np.sort(np.random.default_rng(seed).choice(len(self), count, replace=False))
        return self.gather(rows)


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
    queries: np.ndarray, candidates: np.ndarray, vectors: FloatVectors, k: int, metric: str = "ip"
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


def exact_search(
    queries: np.ndarray, vectors: FloatVectors, k: int, metric: str = "ip"
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` scores and rows, streaming the vectors block by block (the ground truth of tuning)."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    k = min(k, len(vectors))
    best_scores = np.full((len(queries), k), _worst(metric), dtype=np.float32)
    best_rows = np.full((len(queries), k), -1, dtype=np.int64)
    rows_per_block = max(k, _BLOCK_FLOATS // 4 // max(1, len(queries)))
    for first, block in vectors.blocks(rows_per_block):
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
