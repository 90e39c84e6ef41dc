"""``TokenRows``: late-interaction (ColBERT-style) vectors, a bag of token vectors per text, the form every
multi-vector stage passes on; and the exact MaxSim that every approximate multi-vector search is tested against.

A text's tokens are ``vectors[offsets[i]:offsets[i + 1]]`` (``offsets`` int64, ``len(rows) + 1``); ``vectors`` is one
``[tokens, dim]`` array (float16 or float32, as stored), so a corpus is two arrays, never a padded
``[texts, longest, dim]`` block.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

TOKEN_DTYPES = ("float16", "float32")


@dataclass(frozen=True)
class TokenRows:
    offsets: np.ndarray
    vectors: np.ndarray

    def __post_init__(self) -> None:
        if self.offsets.ndim != 1 or len(self.offsets) == 0 or self.offsets[0] != 0:
            raise ValueError("offsets must be 1-d and start at 0")
        if self.vectors.ndim != 2 or self.offsets[-1] != len(self.vectors):
            raise ValueError("offsets and vectors disagree on the number of token vectors")
        if np.any(np.diff(self.offsets) < 0):
            raise ValueError("offsets must not decrease")

    @classmethod
    def empty(cls, dim: int, dtype: str = "float32") -> TokenRows:
        return cls(np.zeros(1, np.int64), np.zeros((0, dim), dtype))

    @classmethod
    def from_list(cls, rows: Sequence[Any], dim: int, dtype: str = "float32") -> TokenRows:
        """From ``MultiVectorEncoder.encode``'s output: one ``[tokens, dim]`` tensor or array per text."""
        arrays = [row.float().cpu().numpy() if hasattr(row, "cpu") else np.asarray(row, np.float32) for row in rows]
        if not arrays:
            return cls.empty(dim, dtype)
        offsets = np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).astype(np.int64)
        return cls(offsets, np.concatenate(arrays).reshape(-1, dim).astype(dtype))

    @classmethod
    def vstack(cls, parts: Sequence[TokenRows], dim: int | None = None, dtype: str = "float32") -> TokenRows:
        if not parts:
            if dim is None:
                raise ValueError("stacking no rows needs their dimension")
            return cls.empty(dim, dtype)
        if len({part.dim for part in parts}) != 1:
            raise ValueError(f"rows of different dimensions: {sorted({part.dim for part in parts})}")
        starts = np.cumsum([0, *(len(part.vectors) for part in parts[:-1])])
        offsets = np.concatenate([[0], *(part.offsets[1:] + start for part, start in zip(parts, starts))])
        return cls(offsets.astype(np.int64), np.concatenate([part.vectors for part in parts]))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def nbytes(self) -> int:
        """Bytes the rows hold in memory (and in a shard, before compression)."""
        return int(self.offsets.nbytes + self.vectors.nbytes)

    def row(self, i: int) -> np.ndarray:
        return self.vectors[self.offsets[i] : self.offsets[i + 1]]

    def take(self, rows: Iterable[int]) -> TokenRows:
        """These rows, in this order."""
        picked = [self.row(i) for i in rows]
        if not picked:
            return TokenRows(np.zeros(1, np.int64), self.vectors[:0])
        offsets = np.concatenate([[0], np.cumsum([len(p) for p in picked])]).astype(np.int64)
        return TokenRows(offsets, np.concatenate(picked))

    def token_stats(self) -> dict[str, float]:
        """Token vectors per row and stored bytes per row: what a multi-vector index holds and a search reads."""
        lengths = self.lengths
        if not len(lengths):
            return {"rows": 0, "mean": 0.0, "median": 0.0, "max": 0, "bytes_per_row": 0.0}
        row_bytes = lengths * self.dim * self.vectors.itemsize
        return {"rows": len(lengths), "mean": float(lengths.mean()), "median": float(np.median(lengths)),
                "max": int(lengths.max()), "bytes_per_row": float(row_bytes.mean())}  # fmt: skip


def maxsim(queries: TokenRows, documents: TokenRows, budget: int = 1 << 25) -> np.ndarray:
    """Exact late-interaction scores ``[queries, documents]``: for each query token its largest dot product with
    any of the document's tokens, summed over the query's tokens (ColBERT's MaxSim), in float32.

    Queries and documents are taken in blocks whose token products stay near ``budget`` numbers, so memory is
    bounded whatever the corpus size. A document with no tokens scores 0 (as sentence-transformers' ``maxsim``).
    """
    scores = np.zeros((len(queries), len(documents)), np.float32)
    for q_start, q_stop in _blocks(queries, budget // 1024):
        chunk = queries.take(range(q_start, q_stop))
        for d_start, d_stop in _blocks(documents, max(1, budget // max(1, len(chunk.vectors)))):
            scores[q_start:q_stop, d_start:d_stop] = _maxsim_block(chunk, documents, d_start, d_stop)
    return scores


def _blocks(rows: TokenRows, tokens: int) -> Iterable[tuple[int, int]]:
    """Consecutive row ranges of about ``tokens`` token vectors each (a longer row is a block of its own)."""
    start = 0
    while start < len(rows):
        stop = start + 1
        while stop < len(rows) and rows.offsets[stop + 1] - rows.offsets[start] <= tokens:
            stop += 1
        yield start, stop
        start = stop


def _maxsim_block(queries: TokenRows, documents: TokenRows, start: int, stop: int) -> np.ndarray:
    import torch

    block = documents.vectors[documents.offsets[start] : documents.offsets[stop]]
    products = torch.from_numpy(queries.vectors.astype(np.float32)) @ torch.from_numpy(block.astype(np.float32)).T
    lengths = torch.from_numpy(documents.lengths[start:stop])
    segment = torch.repeat_interleave(torch.arange(stop - start), lengths).expand(products.shape[0], -1)
    best = torch.full((products.shape[0], stop - start), float("-inf"))
    best.scatter_reduce_(1, segment, products, reduce="amax")
    best = torch.where(torch.isinf(best), torch.zeros_like(best), best)  # a document with no tokens
    query_of_token = torch.from_numpy(np.repeat(np.arange(len(queries)), queries.lengths))
    return torch.zeros(len(queries), stop - start).index_add_(0, query_of_token, best).numpy()
