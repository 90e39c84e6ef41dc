"""``SparseEngine``: the serving engine over an index of sparse or token rows (any engine the registry opens).

The same batches as ``Engine``: every text of a batch encoded in one ``encode_queries`` call, each request searched
at its own ``k`` through the index's own ``search``, so the answers are the library's; embeddings are the queries'
rows: sparse vectors (``{"indices", "values"}`` per text, as text-embeddings-inference's ``/embed_sparse`` gives) or
token vectors (a list of vectors per text).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedkit.search.queries import require_family, search_documents
from embedkit.serving.engine import Engine
from embedkit.validation import check_texts, check_whole


class SparseEngine(Engine):
    def __init__(self, model: Any, index: Any, dataset: Any = None, snippet_chars: int = 300, index_path=None) -> None:
        require_family(model, index.family)
        model.check(index)
        self.model, self.index, self.dataset, self.snippet_chars = model, index, dataset, snippet_chars
        self.index_path = None if index_path is None else str(Path(index_path).resolve())
        self.model_settings = model.settings

    def describe(self) -> dict[str, Any]:
        index = {"path": self.index_path, "engine": self.index.engine, "count": len(self.index), "dim": self.model.dim}
        return {
            "index": index,
            "model": {**self.model_settings, "device": self.model.device},
            "dataset": None if self.dataset is None else {"name": self.dataset.name, "path": str(self.dataset.path)},
        }

    def process(self, work: list[tuple[list[str], int | None]]) -> list[Any]:
        texts = check_texts([text for request_texts, _ in work for text in request_texts], "texts")
        for _, k in work:
            check_whole(k, "k", minimum=1)
        vectors = self.model.encode_queries(texts)
        results, start = [], 0
        for request_texts, k in work:
            rows = vectors.take(range(start, start + len(request_texts)))
            start += len(request_texts)
            if k is None:
                results.append((rows, self.token_count(request_texts)))
            else:
                results.append(self._with_documents(self._search(rows, k)))
        return results

    def _search(self, rows: Any, k: int) -> list[list[tuple[str, float]]]:
        """Each row's top ``k`` documents (id, score), best first: an index of chunk rows answers documents, each by
        its best chunk (MaxP), as ``embedkit search`` does."""
        hits = search_documents(self.index, rows, k)
        return [hits.ranked(i) for i in range(len(rows))]

    def token_count(self, texts: list[str]) -> int:
        """Tokens the document tokenizer reads of the texts (after truncation)."""
        encoded = self.model.st.tokenizer(texts, truncation=True, max_length=self.model.max_length)
        return int(sum(len(ids) for ids in encoded["input_ids"]))

    def _with_documents(self, found: list[list[tuple[str, float]]]) -> list[list[dict]]:
        documents = self._documents({doc_id for row in found for doc_id, _ in row})
        empty = {"title": None, "snippet": None}
        return [[{"id": d, "score": s, **documents.get(d, empty)} for d, s in row] for row in found]
