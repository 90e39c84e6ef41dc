"""From chunk hits to document scores, before the top-k: MaxP (a document's best chunk), FirstP (its first chunk) and
SumP (the sum of its best ``sum_top`` chunks among the hits), as Dai and Callan (2019) named them and pyserini's
``--max-passage`` runs MaxP.

An index of chunk rows (ids ``<document>#<n>``, from an encode with ``--chunking``) is searched deeper and deeper
until every query has ``k`` documents (or the index is exhausted), so ``k`` documents come back, and on a Flat index
MaxP and FirstP equal brute force over all chunks followed by the aggregation. SumP adds the chunks among the hits
of that depth, as pyserini aggregates the passages it retrieved.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from embedkit.errors import EmbedkitError
from embedkit.models.chunking import CHUNK_SEPARATOR
from embedkit.validation import check_whole

AGGREGATIONS = ("maxp", "firstp", "sump")
MAX_SUM_TOP = 1 << 16


@dataclass(frozen=True)
class Aggregation:
    """How chunk scores make a document's score (``sum_top``: the chunks SumP adds, SumP only)."""

    method: str = "maxp"
    sum_top: int | None = None

    def check(self) -> Aggregation:
        if self.method not in AGGREGATIONS:
            raise EmbedkitError(
                f"unknown value '{self.method}' (choose from {', '.join(AGGREGATIONS)})", field="--aggregation"
            )
        check_whole(self.sum_top, "--sum-top", minimum=1, maximum=MAX_SUM_TOP)
        if self.sum_top is not None and self.method != "sump":
            raise EmbedkitError(f"is sump's; not for {self.method}", field="--sum-top")
        return self

    @property
    def top(self) -> int:
        return 1 if self.method != "sump" else self.sum_top or 3

    def to_dict(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}


def chunking_of(index: Any) -> dict[str, Any] | None:
    """The chunking an index's rows were encoded with (recorded with its model), or None for document rows."""
    return (index.model_settings or {}).get("chunking")


def check_aggregation(index: Any, aggregation: Aggregation | None) -> None:
    """An aggregation is for an index of chunk rows; refused for one of whole documents (it would do nothing)."""
    if aggregation is not None:
        aggregation.check()
        if chunking_of(index) is None:
            raise EmbedkitError(
                "combines the scores of a document's chunks; this index holds whole documents (encode with "
                "--chunking to make chunks)",
                field="--aggregation",
            )


def split_chunk_id(row_id: str) -> tuple[str, int]:
    """``("doc#1", 2)`` from ``"doc#1#2"``: the document id and the chunk number."""
    document, _, number = row_id.rpartition(CHUNK_SEPARATOR)
    if not document or not number.isdigit():
        raise EmbedkitError(f"'{row_id}' is not a chunk row id (<document>{CHUNK_SEPARATOR}<n>)", field="docid")
    return document, int(number)


@dataclass
class ChunkMap:
    """Each row's document (a number into ``documents``) and chunk number; made once per index."""

    documents: list[str]
    parent: np.ndarray
    number: np.ndarray

    @classmethod
    def of(cls, ids: list[str]) -> ChunkMap:
        position: dict[str, int] = {}
        parent = np.empty(len(ids), dtype=np.int64)
        number = np.empty(len(ids), dtype=np.int64)
        for row, row_id in enumerate(ids):
            document, number[row] = split_chunk_id(row_id)
            parent[row] = position.setdefault(document, len(position))
        return cls(list(position), parent, number)


_MAPS: weakref.WeakKeyDictionary[Any, ChunkMap] = weakref.WeakKeyDictionary()


def chunk_map(index: Any) -> ChunkMap:
    if index not in _MAPS:
        _MAPS[index] = ChunkMap.of(index.ids)
    return _MAPS[index]


@dataclass
class DocumentHit:
    document: str
    score: float
    chunk: int  # the row of the document's best chunk (its first for FirstP)


def aggregate(rows: np.ndarray, scores: np.ndarray, chunks: ChunkMap, aggregation: Aggregation) -> list[DocumentHit]:
    """One query's chunk hits (best first; row -1: none) as document hits, best first."""
    found: dict[int, DocumentHit] = {}
    added: dict[int, int] = {}
    for row, score in zip(rows.tolist(), scores.tolist()):
        if row < 0:
            break
        parent = int(chunks.parent[row])
        if aggregation.method == "firstp" and chunks.number[row] != 0:
            continue
        if parent not in found:
            found[parent], added[parent] = DocumentHit(chunks.documents[parent], float(score), row), 1
        elif aggregation.method == "sump" and added[parent] < aggregation.top:
            found[parent].score += float(score)
            added[parent] += 1
    return sorted(found.values(), key=lambda hit: -hit.score)


def search_chunked(
    index: Any, queries: Any, k: int, aggregation: Aggregation | None = None, **params: Any
) -> list[list[DocumentHit]]:
    """Top-``k`` documents per query row (any family's rows) of a chunked index; ``params`` go to
    ``index.search_rows`` or ``search``."""
    from embedkit.rows import format_of

    aggregation = (aggregation or Aggregation()).check()
    if index.capabilities.updatable or not hasattr(index, "search_rows"):
        return _search_chunked_by_id(index, queries, k, aggregation, params)
    chunks = chunk_map(index)
    total = len(index)
    k = min(k, len(chunks.documents))
    per_document = total / max(1, len(chunks.documents))
    depth = min(total, max(k, math.ceil(2 * k * per_document)))
    results: list[list[DocumentHit]] = [[] for _ in range(len(queries))]
    pending = np.arange(len(queries))
    while len(pending):
        scores, rows = _search_rows(index, format_of(queries).take(queries, pending), depth, params)
        again = []
        for position, query in enumerate(pending.tolist()):
            hits = aggregate(rows[position], scores[position], chunks, aggregation)
            exhausted = depth >= total or (rows[position] < 0).any()
            if len(hits) >= k or exhausted:
                results[query] = hits[:k]
            else:
                again.append(query)
        pending, depth = np.array(again, dtype=np.int64), min(total, depth * 2)
    return results


def _search_chunked_by_id(index: Any, queries: Any, k: int, aggregation: Aggregation, params: dict) -> list:
    """``search_chunked`` for an index whose rows change (a living one) or that numbers no rows: chunk hits are told
    apart by their ids, and each query is searched twice as deep until ``k`` documents qualify or it is exhausted.
    A hit's ``chunk`` is then -1 (no row number)."""
    from embedkit.rows import format_of

    total, depth = len(index), min(len(index), 2 * k)
    results: list[list[DocumentHit]] = [[] for _ in range(len(queries))]
    pending = list(range(len(queries)))
    while pending and depth > 0:
        hits = index.search(format_of(queries).take(queries, pending), depth, **params)
        again = []
        for position, query in enumerate(pending):
            found = aggregate_ids(hits.ids[position], hits.scores[position], aggregation)
            if len(found) >= k or depth >= total or len(hits.ids[position]) < depth:
                results[query] = found[:k]
            else:
                again.append(query)
        pending, depth = again, min(total, depth * 2)
    return results


def aggregate_ids(ids: list[str], scores: np.ndarray, aggregation: Aggregation) -> list[DocumentHit]:
    """One query's chunk hits (best first), told apart by id, as document hits, best first."""
    found: dict[str, DocumentHit] = {}
    added: dict[str, int] = {}
    for row_id, score in zip(ids, scores.tolist()):
        document, number = split_chunk_id(row_id)
        if aggregation.method == "firstp" and number != 0:
            continue
        if document not in found:
            found[document], added[document] = DocumentHit(document, float(score), -1), 1
        elif aggregation.method == "sump" and added[document] < aggregation.top:
            found[document].score += float(score)
            added[document] += 1
    return sorted(found.values(), key=lambda hit: -hit.score)


def _search_rows(index: Any, queries: np.ndarray, depth: int, params: dict[str, Any]) -> tuple[np.ndarray, Any]:
    """Row numbers of the hits (-1: none), from ``search_rows`` where the index has it, else from its ids."""
    if hasattr(index, "search_rows"):
        return index.search_rows(queries, depth, **params)
    scores, hits = index.search(queries, depth, **params)
    row_of = {row_id: row for row, row_id in enumerate(index.ids)}
    rows = np.full(scores.shape, -1, dtype=np.int64)
    for position, row_ids in enumerate(hits):
        rows[position, : len(row_ids)] = [row_of[row_id] for row_id in row_ids]
    return scores, rows
