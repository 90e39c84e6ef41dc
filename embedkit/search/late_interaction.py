"""Late interaction (``--retriever colbert``): ``LateInteractionRetrieval``, the one path from a multi-vector model
and a corpus to its index and runs.

The corpus's token vectors come from the embeddings cache as dense ones do (``cached_corpus_embeddings``: one encode
per model and corpus); the index is the spec's engine from the registry: the exact one (exhaustive MaxSim, the
reference), an IVF over the token vectors (candidates by nearest tokens, then MaxSim) or the compressed PLAID one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedkit.data.beir import BeirDataset
from embedkit.encode.cache import cached_corpus_embeddings
from embedkit.encode.folder import EmbeddingsFolder
from embedkit.index.registry import MULTIVECTOR_FORMAT, engine_class
from embedkit.protocols import Run
from embedkit.search.queries import require_family, search_queries
from embedkit.search.retriever import LateInteraction


def check_multivector_model(model: Any) -> None:
    require_family(model, "multivector")


class LateInteractionRetrieval:
    """A multi-vector model over a dataset's corpus: its cached token vectors, their index, searches of it."""

    def __init__(self, model: Any, spec: LateInteraction | None = None, cache_dir: str | Path | None = None) -> None:
        check_multivector_model(model)
        self.model, self.spec, self.cache_dir = model, (spec or LateInteraction()).check(), cache_dir
        self._embeddings: dict[str, EmbeddingsFolder] = {}
        self._index: dict[str, Any] = {}
        self.query_tokens: dict[str, float] | None = None  # token vectors per query of the last search

    def embeddings(self, data: BeirDataset) -> EmbeddingsFolder:
        if data.corpus_sha256 not in self._embeddings:
            self._embeddings[data.corpus_sha256] = cached_corpus_embeddings(self.model, data, self.cache_dir)
        return self._embeddings[data.corpus_sha256]

    def document_tokens(self, data: BeirDataset) -> dict[str, float]:
        """Token vectors and stored bytes per document over the corpus, from the shards' records."""
        shards = [entry["tokens"] for entry in self.embeddings(data).manifest["shards"]]
        rows = sum(shard["rows"] for shard in shards)
        mean = sum(shard["mean"] * shard["rows"] for shard in shards) / max(rows, 1)
        stored = sum(shard["bytes_per_row"] * shard["rows"] for shard in shards) / max(rows, 1)
        return {"rows": rows, "mean": mean, "max": max((s["max"] for s in shards), default=0), "bytes_per_row": stored}

    def costs(self, data: BeirDataset) -> dict[str, Any]:
        """What a report records of the last search: token vectors per query and per document."""
        return {"late_interaction": {"query_tokens": self.query_tokens, "document_tokens": self.document_tokens(data)}}

    def index(self, data: BeirDataset) -> Any:
        """The spec's engine over the corpus's token vectors (built once per corpus)."""
        if data.corpus_sha256 not in self._index:
            index = engine_class(MULTIVECTOR_FORMAT, self.spec.index).build(self.embeddings(data))
            if index.search_parameters:
                index.set_search_params(self.spec.nprobe, self.spec.candidates)
            self._index[data.corpus_sha256] = index
        return self._index[data.corpus_sha256]

    def search(self, data: BeirDataset, queries: dict[str, str], k: int, ignore_identical_ids: bool = False) -> Run:
        run, self.query_tokens = late_search(self.model, self.index(data), queries, k, ignore_identical_ids)
        return run


def late_search(
    model: Any,
    index: Any,
    queries: dict[str, str],
    k: int,
    ignore_identical_ids: bool = False,
) -> tuple[Run, dict[str, float]]:
    """Top-``k`` documents per query by MaxSim, and the queries' token counts; with ``ignore_identical_ids`` a hit
    whose id equals the query id is dropped (one deeper is searched)."""
    check_multivector_model(model)
    run, vectors = search_queries(model, index, queries, k, ignore_identical_ids=ignore_identical_ids)
    lengths = vectors.lengths
    stats = {"rows": len(lengths), "mean": float(lengths.mean()) if len(lengths) else 0.0,
             "max": int(lengths.max()) if len(lengths) else 0}  # fmt: skip
    return run, stats
