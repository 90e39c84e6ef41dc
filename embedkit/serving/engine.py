"""``Engine``: the index, the model that built it and (optionally) the corpus, as one batch function.

``process`` is what the micro-batcher's worker thread runs: every text of a batch is encoded in one
``encode_queries`` call and searched with ``Index.search``, exactly as a script would, so the server's answers are
the library's answers. Titles and snippets are read here too, off the event loop.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.data.beir import doc_text
from embedkit.errors import EmbedkitError
from embedkit.search.chunks import (
    Aggregation,
    DocumentHit,
    check_aggregation,
    chunk_map,
    chunking_of,
    search_chunked,
    split_chunk_id,
)
from embedkit.validation import check_texts, check_whole

if TYPE_CHECKING:
    from embedkit.data.beir import BeirDataset
    from embedkit.index.faiss_index import Index
    from embedkit.index.partitioned import PartitionedIndex
    from embedkit.models.embedding_model import EmbeddingModel

Hit = dict[str, Any]


class Engine:
    """Answers batches of ``(texts, k)``: ``k`` hits per text, or (``k`` None) the texts' embeddings."""

    def __init__(
        self,
        model: EmbeddingModel,
        index: Index | PartitionedIndex,
        dataset: BeirDataset | None = None,
        snippet_chars: int = 300,
        index_path: str | Path | None = None,
        aggregation: Aggregation | None = None,
    ) -> None:
        index.check_model(model.settings)  # refuse a model other than the index's, as 'embedkit search' does
        check_aggregation(index, aggregation)
        # an index of chunk rows answers with documents (their best chunk's text as the snippet)
        self.aggregation = (aggregation or Aggregation()) if chunking_of(index) is not None else None
        if model.dim != index.dim:
            raise EmbedkitError(
                f"the model gives {model.dim}-d vectors, the index holds {index.dim}-d", field="--model"
            )
        self.model = model
        self.index = index
        self.dataset = dataset
        self.snippet_chars = snippet_chars
        self.index_path = None if index_path is None else str(Path(index_path).resolve())
        self.model_lock = threading.Lock()  # the batcher's worker and the document writer share the model
        if dataset is not None and not hasattr(index, "store"):  # a changed index holds documents added since
            ids = index.ids if self.aggregation is None else chunk_map(index).documents
            missing = [doc_id for doc_id in ids if doc_id not in dataset.row_of]
            if missing:
                raise EmbedkitError(
                    f"the index holds {len(missing)} document ids the corpus lacks (e.g. '{missing[0]}'): "
                    "give the dataset the index was built from",
                    field="--dataset",
                )
        self.model_settings = model.settings  # hashes the weights once, now rather than on the first /health

    @property
    def model_names(self) -> set[str]:
        """Names a client may give as ``model``: the recorded name and its last path part."""
        return {self.model.name, Path(self.model.name).name}

    def describe(self) -> dict[str, Any]:
        """The index and model settings that /health reports."""
        meta = self.index.meta
        return {
            "index": {
                "path": self.index_path,
                "factory": meta.get("factory"),
                "metric": meta.get("metric"),
                "count": len(self.index),
                "dim": self.index.dim,
                "search_params": dict(self.index.search_params),
                "fields": dict(self.index.store.fields) if hasattr(self.index, "store") else {},
                "aggregation": None if self.aggregation is None else self.aggregation.to_dict(),
            },
            "model": {**self.model_settings, "device": self.model.device},
            "dataset": None if self.dataset is None else {"name": self.dataset.name, "path": str(self.dataset.path)},
        }

    # --- the worker's side ---------------------------------------------------------------------------------------

    def process(self, work: list[tuple[list[str], int | None]]) -> list[Any]:
        """One batch: all texts encoded together; each request's rows searched at its own ``k``.

        Requests are grouped by ``k`` rather than searched at the largest and cut, so a hit list never depends on
        which other requests shared the batch. Texts and ``k`` are checked again here (a library entry point trusts
        no caller): a text that cannot be encoded is an ``EmbedkitError``, not the tokenizer's ``TypeError``. A
        ``k`` above the index's size returns the whole index, as FAISS does, without allocating ``k`` slots.
        """
        texts = check_texts([text for request_texts, _ in work for text in request_texts], "texts")
        for _, k in work:
            check_whole(k, "k", minimum=1)
        with self.model_lock:
            vectors = self.model.encode_queries(texts, show_progress=False)
        bounds = np.cumsum([0] + [len(request_texts) for request_texts, _ in work])
        results: list[Any] = [None] * len(work)
        by_k: dict[int, list[int]] = {}
        for position, (request_texts, k) in enumerate(work):
            if k is None:
                rows = vectors[bounds[position] : bounds[position + 1]]
                results[position] = (rows, self.token_count(request_texts))
            else:
                by_k.setdefault(k, []).append(position)
        for k, positions in by_k.items():
            rows = np.concatenate([np.arange(bounds[p], bounds[p + 1]) for p in positions])
            if self.aggregation is not None:
                found = self._document_hits(search_chunked(self.index, vectors[rows], k, self.aggregation))
            else:
                scores, hits = self.index.search(vectors[rows], max(1, min(k, len(self.index))))
                found = self._hits(scores, hits)
            start = 0
            for p in positions:
                count = int(bounds[p + 1] - bounds[p])
                results[p] = found[start : start + count]
                start += count
        return results

    def search_filtered(self, texts: list[str], k: int, expression: str) -> list[list[Hit]]:
        """A filtered ``/search``: outside the batcher, since its hits depend on the filter (one request's texts)."""
        with self.model_lock:
            vectors = self.model.encode_queries(texts, show_progress=False)
        scores, hits = self.index.search(vectors, max(1, min(k, len(self.index))), filter=expression)
        return self._hits(scores, hits)

    def token_count(self, texts: list[str]) -> int:
        """Tokens the model read (prompt included, after truncation): the ``usage`` of an embeddings response."""
        from embedkit.models.batching import token_lengths

        return int(token_lengths(self.model, texts, self.model.query_prompt).sum())

    def _hits(self, scores: np.ndarray, hits: list[list[str | None]]) -> list[list[Hit]]:
        found = [
            [(doc_id, float(score)) for doc_id, score in zip(row, row_scores) if doc_id is not None]
            for row, row_scores in zip(hits, scores)
        ]
        documents = self._documents({doc_id for row in found for doc_id, _ in row})
        return [
            [
                {"id": doc_id, "score": score, **documents.get(doc_id, {"title": None, "snippet": None})}
                for doc_id, score in row
            ]
            for row in found
        ]

    def _document_hits(self, found: list[list[DocumentHit]]) -> list[list[Hit]]:
        """Documents from chunk hits; with a dataset, the snippet is the text of the chunk that scored."""
        documents = self._documents({hit.document for row in found for hit in row}, whole=True)
        out = []
        for row in found:
            hits = []
            for hit in row:
                document = documents.get(hit.document)
                snippet = None
                if document is not None:
                    start, end = self._chunk_span(document["text"], self.index.ids[hit.chunk])
                    snippet = _snippet(document["text"][start:end], self.snippet_chars)
                title = None if document is None else document["title"]
                hits.append({"id": hit.document, "score": hit.score, "title": title, "snippet": snippet})
            out.append(hits)
        return out

    def _chunk_span(self, text: str, chunk_id: str) -> tuple[int, int]:
        from embedkit.models.chunked_encode import document_spans

        with self.model_lock:  # the tokenizer is the model's
            spans = document_spans(self.model, text)
        number = split_chunk_id(chunk_id)[1]
        return (0, len(text)) if number >= len(spans) else tuple(spans[number].tolist())

    def _documents(self, doc_ids: set[str], whole: bool = False) -> dict[str, dict[str, str | None]]:
        """Title and the start of the text of each id (nothing without a dataset)."""
        if self.dataset is None or not doc_ids:
            return {}
        wanted = sorted(doc_ids, key=self.dataset.row_of.__getitem__)
        columns = self.dataset.corpus[[self.dataset.row_of[doc_id] for doc_id in wanted]]
        titles = columns.get("title") or [""] * len(wanted)
        if whole:  # the text a chunked encode cut, whose character spans the chunks are
            return {
                doc_id: {"title": title or None, "text": doc_text({"title": title, "text": text})}
                for doc_id, title, text in zip(wanted, titles, columns["text"])
            }
        return {
            doc_id: {"title": title or None, "snippet": _snippet(text, self.snippet_chars)}
            for doc_id, title, text in zip(wanted, titles, columns["text"])
        }


def _snippet(text: str, chars: int) -> str:
    """The text's first ``chars`` characters, cut at a word boundary."""
    text = " ".join(text.split())
    if len(text) <= chars:
        return text
    cut = text[:chars].rsplit(" ", 1)[0]
    return cut + " …"
