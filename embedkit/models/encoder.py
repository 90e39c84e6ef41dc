"""``Encoder``: the base every model ``load_model`` returns shares, whatever its family (``embedkit.protocols``).

A family is a subclass that names its ``kind``, the settings that must agree between an index and the queries searched
against it (``identity``), and how texts become its rows. ``check(index)`` is the one place a model meets an index
built by a model: it refuses another model's index and lets the index take what it needs from the model
(``bind_model``: a Lucene impact folder written before it recorded its terms takes the vocabulary).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from embedkit.errors import EmbedkitError

# what a dense index and its queries must share (``EmbeddingModel.identity``; FAISS folders check it on load too)
DENSE_IDENTITY = ("model", "weights_sha256", "pooling", "normalize", "dim", "max_length", "document_prompt")


def check_model_settings(built_with: dict[str, Any], settings: dict[str, Any], identity: Sequence[str]) -> None:
    """Refuse query rows from a model other than the one that encoded the documents (the ``identity`` keys)."""
    differs = [key for key in identity if built_with.get(key) != settings.get(key)]
    if differs:
        detail = ", ".join(f"{key}: index {built_with.get(key)!r}, model {settings.get(key)!r}" for key in differs)
        raise EmbedkitError(f"the index was built with another model ({detail})")


class Encoder:
    """Encodes queries and documents to one family's rows, with every setting that decides them recorded."""

    kind: ClassVar[str] = ""
    identity: ClassVar[tuple[str, ...]] = ()  # settings an index and its queries must share
    encodes_token_batches: ClassVar[bool] = False  # encodes batches tokenized elsewhere (Ray's read tasks)
    pools_token_vectors: ClassVar[bool] = False  # one vector pooled from token vectors: late chunking can pool spans

    @property
    def settings(self) -> dict[str, Any]:
        raise NotImplementedError

    def encode_queries(self, queries: Sequence[str], **kwargs: Any) -> Any:
        raise NotImplementedError

    def encode_documents(self, documents: Sequence[str], **kwargs: Any) -> Any:
        raise NotImplementedError

    def check(self, index: Any) -> None:
        """Refuse an index built by another model or with other settings; hand the index what it takes from its
        model. An index that records no model (a pyserini folder) is taken as it is."""
        recorded = index.model_settings
        if recorded:
            check_model_settings(recorded, self.settings, self.identity)
        bind = getattr(index, "bind_model", None)
        if bind is not None:
            bind(self)
