"""The three shapes every family of representation and every capability goes through (a leaf: every stage uses them).

- an ``Encoder`` turns texts into rows (``encode_queries`` / ``encode_documents``) and records what decides them;
- ``Rows`` are what it returns: a dense float array, ``SparseRows`` (learned sparse) or ``TokenRows`` (late
  interaction), one row per text;
- a ``SearchIndex`` holds document rows and answers ``search(rows, k, filter=...) -> Hits`` whatever its engine.

A new family implements the three and registers its index engines (``embedkit.index.registry``); chunking, the living
index, fusion, serving and evaluation are written once against these shapes (``docs/concepts/new-family.md``).
Also here: the plain values passed between stages, ``Run`` and ``Qrels``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

Run = dict[str, dict[str, float]]
"""Retrieved documents per query: ``{query_id: {doc_id: score}}``."""

Qrels = dict[str, dict[str, int]]
"""Relevance judgements per query: ``{query_id: {doc_id: grade}}``."""


class Hits(NamedTuple):
    """What every index's ``search`` returns: ``scores[i, j]`` is the score of ``ids[i][j]``, best first.

    ``scores`` is a float32 ``[queries, k]`` array (``k`` clamped to the index size); a query with fewer than ``k``
    hits has a shorter ``ids[i]``, and its scores past that are padding. A NamedTuple, so
    ``scores, ids = index.search(...)`` unpacks.
    """

    scores: np.ndarray
    ids: list[list[str]]

    @classmethod
    def from_ranked(cls, ranked: Sequence[Sequence[tuple[str, float]]], k: int) -> Hits:
        """From per-query lists of ``(doc_id, score)``, best first."""
        width = max([min(k, len(row)) for row in ranked], default=0)
        scores = np.full((len(ranked), width), -np.inf, dtype=np.float32)
        for i, row in enumerate(ranked):
            scores[i, : len(row[:width])] = [score for _, score in row[:width]]
        return cls(scores, [[doc_id for doc_id, _ in row[:width]] for row in ranked])

    def ranked(self, i: int) -> list[tuple[str, float]]:
        """Query ``i``'s hits as ``(doc_id, score)``, best first."""
        return [(doc_id, float(score)) for doc_id, score in zip(self.ids[i], self.scores[i])]

    def to_run(self, query_ids: Iterable[str]) -> Run:
        return {query_id: dict(self.ranked(i)) for i, query_id in enumerate(query_ids)}


@dataclass(frozen=True)
class Capabilities:
    """What an index engine declares it can do; callers ask these instead of testing its class."""

    updatable: bool = False  # takes add / delete / upsert in place (``LiveIndex``)
    filterable: bool = False  # ``search(..., filter=...)`` applies a metadata filter before the top-k
    approximate: bool = False  # may miss a document exact scoring would rank in the top-k
    on_disk: bool = False  # searched from files mapped from disk rather than loaded into memory
    gpu: bool = False  # searched on a GPU


@runtime_checkable
class Rows(Protocol):
    """A batch of encoded texts, one row each (a dense ``np.ndarray`` is one too)."""

    def __len__(self) -> int: ...

    @property
    def nbytes(self) -> int: ...


@runtime_checkable
class Encoder(Protocol):
    """A model that encodes queries and documents to rows, with the settings that decide them recorded."""

    kind: str  # the family: "dense", "sparse", "multivector" (the row type and how rows are scored)

    @property
    def settings(self) -> dict[str, Any]: ...

    def encode_queries(self, queries: Sequence[str], **kwargs: Any) -> Any: ...

    def encode_documents(self, documents: Sequence[str], **kwargs: Any) -> Any: ...

    def check(self, index: SearchIndex) -> None: ...


@runtime_checkable
class SearchIndex(Protocol):
    """Document rows of one model, searched by one engine."""

    engine: str  # the registry's name for it: "faiss", "exact", "ivf", "lucene-impact", "seismic", ...
    family: str  # the rows it holds: "dense", "sparse", "multivector" (``embedkit.rows``)
    search_parameters: tuple[str, ...]  # the engine's own keywords of ``search`` ("nprobe", ...), for the CLI
    capabilities: Capabilities

    @property
    def model_settings(self) -> dict[str, Any]: ...

    def __len__(self) -> int: ...

    def search(self, rows: Any, k: int, *, filter: str | None = None) -> Hits: ...

    def save(self, path: Any, overwrite: bool = False) -> Any: ...
