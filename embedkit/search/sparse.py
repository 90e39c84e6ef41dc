"""Learned sparse retrieval: ``SparseRetrieval``, the one path from a sparse model and a corpus to its index and runs.

The corpus's vectors come from the embeddings cache as dense ones do (``cached_corpus_embeddings``: one encode per
model and corpus); the index is the exact one (sparse products) or a Lucene impact index kept in the cache beside
them, keyed by the embeddings and the quantisation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedkit.data.beir import BeirDataset
from embedkit.encode.cache import cached_corpus_embeddings, default_cache_root
from embedkit.encode.folder import EmbeddingsFolder
from embedkit.index.sparse_exact import SparseExactIndex
from embedkit.protocols import Run
from embedkit.search.queries import require_family, search_queries
from embedkit.search.retriever import Sparse
from embedkit.storage import sha256_json


def check_sparse_model(model: Any) -> None:
    require_family(model, "sparse")


class SparseRetrieval:
    """A sparse model over a dataset's corpus: its cached vectors, the index ``spec`` builds, searches of it."""

    def __init__(self, model: Any, spec: Sparse | None = None, cache_dir: str | Path | None = None) -> None:
        check_sparse_model(model)
        self.model, self.spec, self.cache_dir = model, (spec or Sparse()).check(), cache_dir
        self._embeddings: dict[str, EmbeddingsFolder] = {}
        self._index: dict[str, Any] = {}
        self.query_nnz: dict[str, float] | None = None  # non-zeros per query of the last search

    def embeddings(self, data: BeirDataset) -> EmbeddingsFolder:
        if data.corpus_sha256 not in self._embeddings:
            self._embeddings[data.corpus_sha256] = cached_corpus_embeddings(self.model, data, self.cache_dir)
        return self._embeddings[data.corpus_sha256]

    def document_nnz(self, data: BeirDataset) -> dict[str, float]:
        """Non-zeros per document over the corpus, from the shards' records."""
        shards = [entry["nnz"] for entry in self.embeddings(data).manifest["shards"]]
        rows = sum(shard["rows"] for shard in shards)
        mean = sum(shard["mean"] * shard["rows"] for shard in shards) / max(rows, 1)
        return {"rows": rows, "mean": mean, "max": max((shard["max"] for shard in shards), default=0)}

    def costs(self, data: BeirDataset) -> dict[str, Any]:
        """What a report records of the last search: non-zeros per query and per document."""
        return {"sparse": {"query_nnz": self.query_nnz, "document_nnz": self.document_nnz(data)}}

    def index(self, data: BeirDataset) -> Any:
        if data.corpus_sha256 in self._index:
            return self._index[data.corpus_sha256]
        embeddings = self.embeddings(data)
        if self.spec.index == "exact":
            index = SparseExactIndex.build(embeddings)
        elif self.spec.index == "seismic":
            from embedkit.integrations.seismic import SeismicSparse, build_seismic_index

            folder = Path(self.cache_dir or default_cache_root()) / f"seismic-{_key(embeddings, 'seismic')[:16]}"
            if not (folder / "meta.json").is_file():
                build_seismic_index(folder, embeddings.ids(), embeddings.embeddings(), self.model.settings)
            index = SeismicSparse(folder, self.spec.query_cut, self.spec.heap_factor)
        else:
            from embedkit.integrations.pyserini_impact import LuceneImpact, build_impact_index

            key = _key(embeddings, self.spec.quantization)
            folder = Path(self.cache_dir or default_cache_root()) / f"impact-{key[:16]}"
            if not (folder / "meta.json").is_file():
                rows = embeddings.embeddings()
                build_impact_index(folder, embeddings.ids(), rows, self.model.token_names, self.model.settings,
                                   quantization=self.spec.quantization)  # fmt: skip
            index = LuceneImpact(folder)
        self._index[data.corpus_sha256] = index
        return index

    def search(self, data: BeirDataset, queries: dict[str, str], k: int, ignore_identical_ids: bool = False) -> Run:
        run, self.query_nnz = sparse_search(self.model, self.index(data), queries, k, ignore_identical_ids)
        return run


def _key(embeddings: EmbeddingsFolder, build: Any) -> str:
    """A cached index's key: the vectors' shards and how the index was built from them."""
    return sha256_json({"embeddings": embeddings.manifest["shards"], "quantization": build})


def sparse_search(
    model: Any, index: Any, queries: dict[str, str], k: int, ignore_identical_ids: bool = False
) -> tuple[Run, dict[str, float]]:
    """Top-``k`` documents per query from a sparse index, and the queries' non-zeros; with ``ignore_identical_ids``
    a hit whose id equals the query id is dropped (one deeper is searched)."""
    check_sparse_model(model)
    run, rows = search_queries(model, index, queries, k, ignore_identical_ids=ignore_identical_ids)
    return run, rows.nnz_stats()
