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


QUERY_BLOCK_TOKENS = 256  # query token vectors multiplied at once
PRODUCT_BLOCK = 1 << 20  # products per multiply: a few MB, still in the CPU's cache when their maximum is taken
GROUP_TOKENS = 1 << 16  # document tokens (padded) converted to float32 at a time, then met by every query


def maxsim(queries: TokenRows, documents: TokenRows, budget: int = PRODUCT_BLOCK) -> np.ndarray:
    """Exact late-interaction scores ``[queries, documents]``: for each query token its largest dot product with
    any of the document's tokens, summed over the query's tokens (ColBERT's MaxSim), in float32.

    Documents are taken shortest first, a block of them padded to its longest, so a block's products are one dense
    ``[query tokens, documents, longest]`` array whose maximum is a plain reduction; ``budget`` products a block keep
    it in cache between the multiply and the max, and memory bounded whatever the corpus. A document with no tokens
    scores 0 (as sentence-transformers' ``maxsim``).
    """
    import torch

    scores = np.zeros((len(queries), len(documents)), np.float32)
    if not len(queries.vectors) or not len(documents.vectors):
        return scores  # no token to score: every score 0
    chunks = [_query_block(queries, start, stop) for start, stop in _blocks(queries, QUERY_BLOCK_TOKENS)]
    order = np.argsort(documents.lengths, kind="stable")
    tokens = max(1, budget // QUERY_BLOCK_TOKENS)
    for group in _length_blocks(documents.lengths, order, max(tokens, GROUP_TOKENS)):
        blocks = [(picked, _document_block(documents, picked))
                  for picked in _length_blocks(documents.lengths, group, tokens)]  # fmt: skip
        for (start, stop), query, query_of_token in chunks:
            for picked, block in blocks:
                products = query @ block.view(-1, block.shape[2]).T
                best = products.view(len(query), *block.shape[:2]).amax(2)
                summed = torch.zeros(stop - start, len(picked)).index_add_(0, query_of_token, best)
                scores[start:stop, picked] = summed.numpy()
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


def _length_blocks(lengths: np.ndarray, order: np.ndarray, tokens: int) -> Iterable[np.ndarray]:
    """Rows in ``order`` (shortest first), cut where padding them all to the block's longest exceeds ``tokens``."""
    start = 0
    while start < len(order):
        # rows rise in length, so a block holds at most tokens // (its first row's length) rows, and its padded size
        # is its count times its last row's length: only that window is looked at (linear in the corpus overall)
        window = order[start : start + max(1, tokens // max(1, int(lengths[order[start]])))]
        padded = np.arange(1, len(window) + 1) * np.maximum(lengths[window], 1)
        stop = start + max(1, int(np.searchsorted(padded > tokens, True)))
        yield order[start:stop]
        start = stop


def _query_block(queries: TokenRows, start: int, stop: int) -> tuple[tuple[int, int], Any, Any]:
    """Rows ``start:stop``'s token vectors with one more coordinate, 1, and the query of each token."""
    import torch

    chunk = queries.take(range(start, stop))
    query = np.ones((len(chunk.vectors), chunk.dim + 1), np.float32)
    query[:, :-1] = chunk.vectors
    query_of_token = np.repeat(np.arange(len(chunk)), chunk.lengths)
    return (start, stop), torch.from_numpy(query), torch.from_numpy(query_of_token)


def _document_block(documents: TokenRows, picked: np.ndarray) -> Any:
    """``[documents, longest, dim + 1]`` float32: each document's tokens, padded with tokens whose extra coordinate
    makes their product with any query token float32's lowest number, below every real product (a padding token never
    wins the maximum). A document with no tokens is padding whose products are 0: its score is 0."""
    import torch

    lengths = documents.lengths[picked]
    longest = max(1, int(lengths.max()))
    real = np.arange(longest) < lengths[:, None]
    positions = np.where(real, documents.offsets[picked][:, None] + np.arange(longest), 0)
    block = np.zeros((len(picked), longest, documents.dim + 1), np.float32)
    block[..., :-1] = documents.vectors[positions]
    block[~real, :-1] = 0.0
    block[..., -1] = np.where(real, 0.0, np.finfo(np.float32).min)
    block[lengths == 0, :, -1] = 0.0
    return torch.from_numpy(block)
