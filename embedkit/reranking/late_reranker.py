"""Late interaction as a second stage: a multi-vector model's MaxSim re-scores each query's top ``depth`` hits of any
first-stage run (dense, BM25, SPLADE).

Documents are scored from their stored token vectors when the embeddings cache holds the corpus encoded by this
model (no re-encoding: ``embedkit encode`` or an earlier ``evaluate --retriever colbert`` wrote them); otherwise only
the documents in the heads are encoded. Scores are ``embedkit.multivector.maxsim``, as ``--retriever colbert`` gives.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from embedkit.data.beir import BeirDataset
from embedkit.data.trec import ranked
from embedkit.encode.cache import default_cache_root, embeddings_key
from embedkit.encode.folder import EmbeddingsFolder
from embedkit.errors import EmbedkitError
from embedkit.multivector import TokenRows, maxsim
from embedkit.protocols import Run
from embedkit.reranking.reranker import reordered
from embedkit.reranking.settings import RerankSettings
from embedkit.search.late_interaction import check_multivector_model


def stored_token_vectors(model: Any, dataset: BeirDataset, cache_root: str | Path | None) -> EmbeddingsFolder | None:
    """The corpus's token vectors from the embeddings cache, when this model's complete encode of it is there."""
    root = Path(cache_root) if cache_root else default_cache_root()
    folder = root / f"corpus-{embeddings_key(model.settings, dataset.corpus_sha256)}"
    if not (folder / "manifest.json").is_file():
        return None
    found = EmbeddingsFolder.open(folder)
    return found if found.complete else None


class LateInteractionReranker:
    """A loaded multi-vector model re-scoring runs by MaxSim; ``pairs_scored`` counts (query, document) scores."""

    def __init__(self, settings: RerankSettings, cache_dir: str | Path | None = None) -> None:
        from embedkit.models.loading import load_model

        self.settings = settings.check()
        self.model = load_model(settings.model, max_length=settings.max_length, dtype=settings.dtype,
                                device=settings.device)  # fmt: skip
        check_multivector_model(self.model)
        self.name, self.device, self.cache_dir = self.model.name, self.model.device, cache_dir
        self.pairs_scored, self.documents_encoded = 0, 0

    def describe(self) -> dict[str, Any]:
        """The settings that change a reranked score, as reports record them."""
        model = self.model
        return {
            **asdict(self.settings),
            "model": self.name,
            "weights_sha256": model.weights_sha256,
            "max_length": model.max_length,
            "dtype": model.dtype,
            "scores": "maxsim",
            "model_settings": model.settings,
        }

    def _documents(self, dataset: BeirDataset, doc_ids: list[str]) -> TokenRows:
        stored = stored_token_vectors(self.model, dataset, self.cache_dir)
        if stored is not None:
            row = {doc_id: i for i, doc_id in enumerate(stored.ids())}
            return stored.embeddings().take([row[doc_id] for doc_id in doc_ids])
        texts = dataset.documents(set(doc_ids))
        self.documents_encoded += len(doc_ids)
        return self.model.encode_documents([texts[doc_id] for doc_id in doc_ids])

    def rerank_run(self, run: Run, dataset: BeirDataset) -> Run:
        """``run`` with each query's top ``depth`` hits re-scored by MaxSim and re-ordered, the rest kept below."""
        heads = {query_id: [doc for doc, _ in ranked(hits)[: self.settings.depth]] for query_id, hits in run.items()}
        unknown = sorted(query_id for query_id in run if query_id not in dataset.queries)
        if unknown:
            raise EmbedkitError(f"query '{unknown[0]}' is not in {dataset.name} ({len(unknown)} such ids)",
                                field="query id")  # fmt: skip
        doc_ids = sorted({doc for docs in heads.values() for doc in docs})
        position = {doc_id: i for i, doc_id in enumerate(doc_ids)}
        documents = self._documents(dataset, doc_ids)
        query_ids = list(run)
        queries = self.model.encode_queries([dataset.queries[q] for q in query_ids])
        scores: dict[tuple[str, str], float] = {}
        for i, query_id in enumerate(query_ids):
            if not heads[query_id]:
                continue
            found = maxsim(queries.take([i]), documents.take([position[d] for d in heads[query_id]]))[0]
            scores.update({(query_id, doc): float(score) for doc, score in zip(heads[query_id], found)})
        self.pairs_scored += len(scores)
        return reordered(run, heads, scores, self.settings)


def is_late_reranker(settings: RerankSettings) -> bool:
    """Whether the settings name a multi-vector model folder (a MaxSim second stage) rather than a cross-encoder."""
    from embedkit.models.multivector_model import is_multivector_folder
    from embedkit.models.reference import resolve_model

    path = resolve_model(settings.model).path
    return path.is_dir() and is_multivector_folder(path)
