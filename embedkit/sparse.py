"""``SparseRows``: learned sparse vectors (SPLADE, CSR) as one CSR matrix, the form every sparse stage passes on.

A row per text: ``indices`` (int32 dimensions, ascending within a row) and ``values`` (float32 weights), delimited by
``indptr`` (int64, ``len(rows) + 1``), over ``dim`` dimensions (a vocabulary, or a sparse auto-encoder's latents). It
never holds a dense ``[texts, dim]`` array, which for a 30,522-word vocabulary is what a sparse model exists to avoid.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class SparseRows:
    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    dim: int

    def __post_init__(self) -> None:
        if self.indptr.ndim != 1 or len(self.indptr) == 0 or self.indptr[0] != 0:
            raise ValueError("indptr must be 1-d and start at 0")
        if self.indptr[-1] != len(self.indices) or len(self.indices) != len(self.values):
            raise ValueError("indptr, indices and values disagree on the number of non-zeros")

    @classmethod
    def empty(cls, dim: int) -> SparseRows:
        return cls(np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32), dim)

    @classmethod
    def from_torch(cls, tensor: Any) -> SparseRows:
        """From a sentence-transformers ``SparseEncoder`` output: a (possibly uncoalesced) sparse COO tensor, or a
        dense one; exact zeros are dropped."""
        rows, dim = int(tensor.shape[0]), int(tensor.shape[1])
        if tensor.is_sparse:
            tensor = tensor.coalesce()
            row, column = tensor.indices().cpu().numpy()
            values = tensor.values().float().cpu().numpy()
        else:
            row, column = np.nonzero(tensor.float().cpu().numpy())
            values = tensor.float().cpu().numpy()[row, column]
        keep = values != 0
        row, column, values = row[keep], column[keep], values[keep]
        order = np.lexsort((column, row))
        counts = np.bincount(row, minlength=rows)
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(indptr, column[order].astype(np.int32), values[order].astype(np.float32), dim)

    @classmethod
    def vstack(cls, parts: Sequence[SparseRows], dim: int | None = None) -> SparseRows:
        if not parts:
            if dim is None:
                raise ValueError("stacking no rows needs their dimension")
            return cls.empty(dim)
        dims = {part.dim for part in parts}
        if len(dims) != 1:
            raise ValueError(f"rows of different dimensions: {sorted(dims)}")
        offsets = np.cumsum([0, *(part.nnz for part in parts[:-1])])
        indptr = np.concatenate([[0], *(part.indptr[1:] + offset for part, offset in zip(parts, offsets))])
        return cls(
            indptr.astype(np.int64),
            np.concatenate([part.indices for part in parts]),
            np.concatenate([part.values for part in parts]),
            parts[0].dim,
        )

    def __len__(self) -> int:
        return len(self.indptr) - 1

    @property
    def nbytes(self) -> int:
        """Bytes the rows hold in memory (and in a shard, before compression)."""
        return int(self.indptr.nbytes + self.indices.nbytes + self.values.nbytes)

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        start, end = self.indptr[i], self.indptr[i + 1]
        return self.indices[start:end], self.values[start:end]

    def take(self, rows: Iterable[int]) -> SparseRows:
        """These rows, in this order."""
        picked = [self.row(i) for i in rows]
        counts = [len(indices) for indices, _ in picked]
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        indices = np.concatenate([i for i, _ in picked]) if picked else np.zeros(0, np.int32)
        values = np.concatenate([v for _, v in picked]) if picked else np.zeros(0, np.float32)
        return SparseRows(indptr, indices.astype(np.int32), values.astype(np.float32), self.dim)

    def nnz_stats(self) -> dict[str, float]:
        """Non-zeros per row: what a sparse index stores and a search reads."""
        counts = np.diff(self.indptr)
        if not len(counts):
            return {"rows": 0, "mean": 0.0, "median": 0.0, "max": 0}
        return {"rows": len(counts), "mean": float(counts.mean()), "median": float(np.median(counts)),
                "max": int(counts.max())}  # fmt: skip

    def to_scipy(self) -> Any:
        from scipy.sparse import csr_matrix

        return csr_matrix((self.values, self.indices, self.indptr), shape=(len(self), self.dim))

    def quantized(self, factor: float) -> SparseRows:
        """Weights as the integers an impact index stores: ``round(w · factor)``, zeros dropped (as pyserini's SPLADE
        conditions quantise, ×100)."""
        values = np.rint(self.values.astype(np.float64) * factor)
        keep = values != 0
        counts = np.add.reduceat(keep, self.indptr[:-1]) if len(self.values) else np.zeros(len(self), np.int64)
        counts = np.where(np.diff(self.indptr) == 0, 0, counts)
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return SparseRows(indptr, self.indices[keep], values[keep].astype(np.float32), self.dim)
