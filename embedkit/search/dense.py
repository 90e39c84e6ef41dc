"""Dense retrieval: encode queries, search a FAISS index, return a ``Run``; and ``DenseRetrieval``, the one path from
a model and a corpus to that index.

``evaluate``, ``mine`` and the MTEB harness all take the corpus's vectors from ``DenseRetrieval``, so one model and
one corpus are encoded once between them (the embeddings cache key: ``embedkit.encode.cache``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedkit.data.beir import BeirDataset
from embedkit.encode.cache import cached_corpus_embeddings
from embedkit.encode.executor import ShardExecutor
from embedkit.encode.folder import EmbeddingsFolder
from embedkit.index import check_factory
from embedkit.index.faiss_helpers import BuildSettings
from embedkit.index.faiss_index import Index
from embedkit.index.partitioned import PartitionedIndex
from embedkit.models.embedding_model import EmbeddingModel
from embedkit.protocols import Run
from embedkit.search.chunks import Aggregation, check_aggregation
from embedkit.search.queries import hits_to_run, require_family, search_documents
from embedkit.search.retriever import Dense


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
    filter: str | None = None,
    aggregation: Aggregation | None = None,
) -> Run:
    """Top-``k`` documents per query (``filter``: a ``LiveIndex``'s metadata condition); with ``ignore_identical_ids``
    a hit whose id equals the query id is dropped (BEIR's rule for ArguAna and Quora), searching one deeper so ``k``
    hits remain. ``rescore=N`` re-ranks the top ``k*N`` by exact float scores (see ``Index.search``). An index of
    chunk rows gives documents scored by ``aggregation`` (MaxP by default; ``embedkit.search.chunks``)."""
    check_aggregation(index, aggregation)
    query_ids = list(queries)
    vectors = model.encode_queries([queries[q] for q in query_ids])
    depth = k + 1 if ignore_identical_ids else k
    extra = {} if rescore is None else {"rescore": rescore}
    if filter is not None:
        extra["filter"] = filter
    hits = search_documents(index, vectors, depth, aggregation, nprobe=nprobe, ef_search=ef_search, **extra)
    return hits_to_run(hits, query_ids, k, ignore_identical_ids)


class DenseRetrieval:
    """A model over a dataset's corpus: its cached vectors, the index ``spec`` builds from them, searches of it."""

    def __init__(
        self,
        model: EmbeddingModel,
        spec: Dense | None = None,
        cache_dir: str | Path | None = None,
        executor: ShardExecutor | None = None,
    ) -> None:
        require_family(model, "dense")
        self.model = model
        self.executor = executor
        self.spec = (spec or Dense()).check()
        self.cache_dir = cache_dir
        self._embeddings: dict[str, EmbeddingsFolder] = {}
        self._index: dict[str, Index] = {}

    def embeddings(self, data: BeirDataset) -> EmbeddingsFolder:
        """The corpus encoded by the model: from the cache, or encoded into it once (``encoded_shards`` says which)."""
        if data.corpus_sha256 not in self._embeddings:
            # what the dimension and corpus size tell about the factory string, before the corpus is encoded
            check_factory(self.spec.factory, self.model.dim, metric=self.spec.metric, count=len(data.corpus))
            self._embeddings[data.corpus_sha256] = cached_corpus_embeddings(
                self.model, data, self.cache_dir, self.executor
            )
        return self._embeddings[data.corpus_sha256]

    def costs(self, data: BeirDataset) -> dict[str, Any]:
        """Nothing beyond the search parameters, which the report records of every run."""
        return {}

    def index(self, data: BeirDataset) -> Index:
        """The index of the corpus (built once per corpus and kept for further searches)."""
        if data.corpus_sha256 not in self._index:
            spec = self.spec
            settings = BuildSettings(spec.factory, spec.metric, nprobe=spec.nprobe, ef_search=spec.ef_search)
            self._index[data.corpus_sha256] = Index.from_vectors(self.embeddings(data), settings)
        return self._index[data.corpus_sha256]

    def search(self, data: BeirDataset, queries: dict[str, str], k: int, ignore_identical_ids: bool = False) -> Run:
        aggregation = self.spec.aggregation_setting
        return dense_search(
            self.model, self.index(data), queries, k, ignore_identical_ids=ignore_identical_ids, aggregation=aggregation
        )
