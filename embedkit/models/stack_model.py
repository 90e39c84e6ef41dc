"""``StackModel``: what a sparse and a multi-vector model share. Both are a sentence-transformers stack encoded through
the library's own ``encode_query``/``encode_document`` (its prompts, lengths and routes), a chunk of texts at a time,
with the settings that decide their vectors recorded; a subclass says how one chunk is encoded and how chunks stack.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from embedkit.models.encoder import Encoder
from embedkit.models.reference import weights_sha256
from embedkit.validation import check_text, check_texts

CHUNK = 256  # texts per call into the library: bounds the tensors held at once


class StackModel(Encoder):

    def __init__(
        self,
        st: Any,
        *,
        name: str,
        local_path: Path | None,
        revision: str | None,
        query_prompt: str,
        document_prompt: str,
        dtype: str,
        device: str,
        batch_size: int = 32,
        chunking: Any = None,
    ) -> None:
        self.st, self.name, self.local_path, self.revision = st, name, local_path, revision
        self.query_prompt, self.document_prompt = query_prompt, document_prompt
        self.dtype, self.device, self.batch_size = dtype, device, batch_size
        self.chunking = chunking if chunking is not None and chunking.active else None  # documents as chunk rows

    def recorded(self, settings: dict[str, Any]) -> dict[str, Any]:
        """A kind's settings with the chunking, where documents are cut (absent otherwise, as records before it)."""
        return settings if self.chunking is None else {**settings, "chunking": self.chunking.to_dict()}

    def encode_chunks(self, documents: Sequence[str], progress: Any = None) -> Any:
        """Document texts as chunk rows (``chunking``): this model's rows, character spans, chunks per document."""
        from embedkit.errors import EmbedkitError
        from embedkit.models.chunked_encode import encode_chunks

        if self.chunking is None:
            raise EmbedkitError("this model encodes documents whole; load it with a chunking", field="chunking")
        return encode_chunks(self, check_texts(documents, "documents"), self.chunking, progress)

    @cached_property
    def weights_sha256(self) -> str | None:
        return None if self.local_path is None else weights_sha256(self.local_path)

    def _encode_chunk(self, encode: Any, texts: list[str], prompt: str | None) -> Any:
        """One chunk of texts through the library's ``encode`` route, in this kind's row type."""
        raise NotImplementedError

    def _stack(self, parts: list[Any]) -> Any:
        raise NotImplementedError

    def _encode(self, texts: list[str], query: bool, progress: Any = None) -> Any:
        from embedkit.models.device import autocast

        encode = self.st.encode_query if query else self.st.encode_document
        prompt = (self.query_prompt if query else self.document_prompt) or None
        parts = []
        with autocast(self.device, self.dtype):
            for start in range(0, len(texts), CHUNK):
                parts.append(self._encode_chunk(encode, texts[start : start + CHUNK], prompt))
                if progress is not None:
                    progress.update(len(parts[-1]))
        return self._stack(parts)

    def encode_queries(self, queries: Sequence[str], **kwargs: Any) -> Any:
        """Query vectors (a list of strings; an empty list gives no rows)."""
        return self._encode(check_texts(queries, "queries"), query=True)

    def encode_documents(self, documents: Sequence[str], **kwargs: Any) -> Any:
        return self._encode(check_texts(documents, "documents"), query=False, progress=kwargs.get("progress"))

    def encode_corpus(self, corpus: Any, **kwargs: Any) -> Any:
        from embedkit.models.embedding_model import corpus_texts

        return self._encode(corpus_texts(corpus), query=False)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings})"


def stack_identity(network: Any, name: str, path: Path | None, revision: str | None, **options: Any) -> dict[str, Any]:
    """The keyword arguments a ``StackModel`` shares, from a loaded stack: its own prompts unless given (checked)."""
    prompts = getattr(network, "prompts", {}) or {}
    given = {key: options.get(f"{key}_prompt") for key in ("query", "document")}
    for key, prompt in given.items():
        check_text(prompt, None, None, f"{key}_prompt", required=False)
    chosen = {key: prompts.get(key, "") if prompt is None else prompt for key, prompt in given.items()}
    return {"name": name, "local_path": path, "revision": revision,
            "query_prompt": chosen["query"], "document_prompt": chosen["document"]}  # fmt: skip
