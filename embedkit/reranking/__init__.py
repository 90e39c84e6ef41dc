"""Stage 6: a second stage that re-scores a first-stage run's top hits with a cross-encoder."""

from typing import TYPE_CHECKING

from embedkit._lazy import lazy_exports

_EXPORTS = {
    "CrossEncoderReranker": "embedkit.reranking.reranker",
    "RerankSettings": "embedkit.reranking.settings",
    "rerank": "embedkit.reranking.reranker",
    "rerank_run": "embedkit.reranking.reranker",
}
__all__ = ["CrossEncoderReranker", "RerankSettings", "rerank", "rerank_run"]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from embedkit.reranking.reranker import CrossEncoderReranker, rerank, rerank_run
    from embedkit.reranking.settings import RerankSettings
