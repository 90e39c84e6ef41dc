"""The plain values passed between stages, and the Protocols a model or searcher must provide (as MTEB does)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

Run = dict[str, dict[str, float]]
"""Retrieved documents per query: ``{query_id: {doc_id: score}}``."""

Qrels = dict[str, dict[str, int]]
"""Relevance judgements per query: ``{query_id: {doc_id: grade}}``."""


@runtime_checkable
class Encoder(Protocol):
    """What a dense retriever needs from a model (the BEIR protocol)."""

    def encode_queries(self, queries: Sequence[str], **kwargs: Any) -> np.ndarray: ...

    def encode_corpus(self, corpus: Any, **kwargs: Any) -> np.ndarray: ...

    @property
    def settings(self) -> dict[str, Any]: ...


@runtime_checkable
class Searcher(Protocol):
    """What a first-stage retriever provides: top-k documents per query."""

    def search(self, queries: dict[str, str], k: int) -> Run: ...
