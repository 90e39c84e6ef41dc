"""EmbeddingModel: a sentence-transformers stack plus the settings that decide its embeddings."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.data.beir import doc_text
from embedkit.errors import EmbedkitError
from embedkit.models.chunking import Chunking, Chunks
from embedkit.models.encoder import DENSE_IDENTITY, Encoder
from embedkit.models.reference import weights_sha256
from embedkit.validation import check_sequence, check_text, check_texts

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


class EmbeddingModel(Encoder):
    """Encodes queries and documents (the BEIR protocol) to one vector each, with recorded, reproducible settings.

    The network is a plain ``SentenceTransformer`` (``.st``), so anything that library does with a model,
    saving, training and model cards included, works on it unchanged.
    """

    kind = "dense"
    identity = DENSE_IDENTITY
    encodes_token_batches = True
    pools_token_vectors = True

    def __init__(
        self,
        st: SentenceTransformer,
        *,
        name: str,
        local_path: Path | None,
        revision: str | None,
        pooling: str,
        query_prompt: str,
        document_prompt: str,
        normalize: bool,
        dtype: str,
        device: str,
        batch_tokens: int | None = None,
        backend: str = "torch",
        backend_config: dict[str, Any] | None = None,
        chunking: Chunking | None = None,
    ) -> None:
        self.st = st
        self.name = name
        self.local_path = local_path
        self.revision = revision
        self.pooling = pooling
        self.query_prompt = query_prompt
        self.document_prompt = document_prompt
        self.normalize = normalize
        self.dtype = dtype
        self.device = device
        # padded tokens per forward pass: on a CPU the best of 2,048-16,384 on texts encode.py does not time
        # (benchmarks/encode_budget.py), large batches on a GPU
        self.batch_tokens = batch_tokens or (4096 if device == "cpu" else 65536)
        self.backend = backend
        self.backend_config = backend_config or {}
        # how documents become rows (``encode_chunks``); queries are always encoded whole
        self.chunking = chunking if chunking is not None and chunking.active else None

    @property
    def max_length(self) -> int | None:
        """Tokens a text is cut to; None for a static model (``distill-static``), which reads every token."""
        length = self.st.max_seq_length
        return None if length is None or length == math.inf else int(length)

    @property
    def dim(self) -> int:
        return int(self.st.get_embedding_dimension())

    @cached_property
    def weights_sha256(self) -> str | None:
        """Content hash of the weight files of a local model (the revision of a model that has no Hub id)."""
        return None if self.local_path is None else weights_sha256(self.local_path)

    @property
    def settings(self) -> dict[str, Any]:
        """Everything that changes the embeddings, as recorded in manifests, indexes and reports."""
        settings = {
            "model": self.name,
            "revision": self.revision,
            "weights_sha256": self.weights_sha256,
            "pooling": self.pooling,
            "query_prompt": self.query_prompt,
            "document_prompt": self.document_prompt,
            "max_length": self.max_length,
            "normalize": self.normalize,
            "dtype": self.dtype,
            "dim": self.dim,
            "backend": self.backend,
        }
        if self.backend_config:  # how an int8 or ONNX backend was built: its quantisation, its runtime's version
            settings["backend_config"] = self.backend_config
        if self.chunking is not None:  # absent when documents are encoded whole, so older records keep their keys
            settings["chunking"] = self.chunking.to_dict()
        return settings

    def encode(
        self, texts: Sequence[str], prompt: str = "", show_progress: bool | None = None, progress: Any = None
    ) -> np.ndarray:
        """Embed ``texts`` (float32, one row per text) in length-sorted, token-budget batches."""
        texts = check_texts(texts, "texts")  # a bare string would be one query per character
        check_text(prompt, None, None, "prompt")
        return self._encode(texts, prompt, show_progress, progress)

    def _encode(self, texts: list[str], prompt: str, show_progress: bool | None, progress: Any = None) -> np.ndarray:
        # The loop needs torch; it is imported here, where a loaded model already brought it in, so that a module
        # that only names this class (the cache, the BM25 path of evaluate) does not load torch for it.
        from embedkit.models.batching import encode_texts

        return encode_texts(self, texts, prompt=prompt, show_progress=show_progress, progress=progress)

    def encode_queries(self, queries: Sequence[str], **kwargs: Any) -> np.ndarray:
        """Embed query texts (a list of strings; an empty list gives a ``(0, dim)`` array)."""
        queries = check_texts(queries, "queries")
        return self._encode(queries, self.query_prompt, kwargs.get("show_progress"))

    def encode_documents(self, documents: Sequence[str], **kwargs: Any) -> np.ndarray:
        """Embed document texts (a list of strings) with the document prompt."""
        documents = check_texts(documents, "documents")
        return self._encode(documents, self.document_prompt, kwargs.get("show_progress"), kwargs.get("progress"))

    def encode_chunks(self, documents: Sequence[str], progress: Any = None) -> Chunks:
        """Embed document texts as chunk rows (``chunking``): vectors, character spans, chunks per document."""
        from embedkit.models.chunked_encode import encode_chunks

        if self.chunking is None:
            raise EmbedkitError("this model encodes documents whole; load it with a chunking", field="chunking")
        return encode_chunks(self, check_texts(documents, "documents"), self.chunking, progress)

    def encode_corpus(self, corpus: Any, **kwargs: Any) -> np.ndarray:
        """Embed documents given as dicts with ``title``/``text`` (or plain strings) or as a ``datasets.Dataset``."""
        return self._encode(corpus_texts(corpus), self.document_prompt, kwargs.get("show_progress"))

    def __repr__(self) -> str:
        return f"EmbeddingModel({self.settings})"


def corpus_texts(corpus: Any) -> list[str]:
    """The text of each document, checked: a dict's ``title`` and ``text`` must be strings that encode (or absent)."""
    texts = []
    for i, doc in enumerate(check_sequence(corpus, "corpus")):
        if isinstance(doc, str):
            texts.append(check_text(doc, None, None, f"corpus[{i}]"))
            continue
        if not isinstance(doc, Mapping):
            raise EmbedkitError(
                f"must be a dict with 'text' (and 'title') or a string, not {type(doc).__name__}", field=f"corpus[{i}]"
            )
        for name in ("title", "text"):
            check_text(doc.get(name), None, None, f"corpus[{i}].{name}", required=False)
        texts.append(doc_text(doc))
    return texts
