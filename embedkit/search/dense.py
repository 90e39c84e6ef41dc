"""Dense retrieval: encode queries, search the FAISS index, return a ``Run``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from embedkit.protocols import Run

if TYPE_CHECKING:  # type hints only: importing them here would close an import cycle through embedkit.report
    from embedkit.index.faiss_index import Index
    from embedkit.index.partitioned import PartitionedIndex
    from embedkit.models.embedding_model import EmbeddingModel


def dense_search(
    model: EmbeddingModel,
    index: Index | PartitionedIndex,
    queries: dict[str, str],
    k: int = 1000,
    *,
    ignore_identical_ids: bool = False,
    nprobe: int | None = None,
    ef_search: int | None = None,
    rescore: int | None = None,
) -> Run:
    """Top-``k`` documents per query; with ``ignore_identical_ids`` a hit whose id equals the query id is dropped
    (BEIR's rule for ArguAna and Quora), searching one deeper so ``k`` hits remain. ``rescore=N`` re-ranks the
    top ``k*N`` by exact float scores (see ``Index.search``)."""
    query_ids = list(queries)
    vectors = model.encode_queries([queries[q] for q in query_ids])
    depth = k + 1 if ignore_identical_ids else k
    extra = {} if rescore is None else {"rescore": rescore}
    scores, hits = index.search(vectors, depth, nprobe=nprobe, ef_search=ef_search, **extra)
    run: Run = {}
    for query_id, row_scores, row_ids in zip(query_ids, scores, hits):
        pairs = [(d, float(s)) for d, s in zip(row_ids, row_scores) if not (ignore_identical_ids and d == query_id)]
        run[query_id] = dict(pairs[:k])
    return run


@dataclass
class DenseSearcher:
    """A model and an index as one ``Searcher`` (see ``embedkit.protocols``)."""

    model: EmbeddingModel
    index: Index | PartitionedIndex
    ignore_identical_ids: bool = False
    params: dict[str, int] = field(default_factory=dict)

    def search(self, queries: dict[str, str], k: int) -> Run:
        return dense_search(
            self.model,
            self.index,
            queries,
            k,
            ignore_identical_ids=self.ignore_identical_ids,
            nprobe=self.params.get("nprobe"),
            ef_search=self.params.get("efSearch"),
            rescore=self.params.get("rescore"),
        )
