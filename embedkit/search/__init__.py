"""Stage 5: queries into a ``Run``: dense, sparse and late-interaction search over an index, BM25, fusion of runs."""

from typing import TYPE_CHECKING

from embedkit._lazy import lazy_exports

_EXPORTS = {
    "Aggregation": "embedkit.search.chunks",
    "Bm25sSearcher": "embedkit.search.bm25",
    "BM25": "embedkit.search.retriever",
    "Dense": "embedkit.search.retriever",
    "DenseRetrieval": "embedkit.search.dense",
    "Fusion": "embedkit.search.retriever",
    "Hybrid": "embedkit.search.retriever",
    "LateInteraction": "embedkit.search.retriever",
    "LateInteractionRetrieval": "embedkit.search.late_interaction",
    "Sparse": "embedkit.search.retriever",
    "SparseRetrieval": "embedkit.search.sparse",
    "bm25_searcher": "embedkit.search.bm25",
    "dense_search": "embedkit.search.dense",
    "fuse": "embedkit.search.fusion",
    "normalized_interpolation": "embedkit.search.fusion",
    "reciprocal_rank_fusion": "embedkit.search.fusion",
}
__all__ = [
    "BM25",
    "Aggregation",
    "Bm25sSearcher",
    "Dense",
    "DenseRetrieval",
    "Fusion",
    "Hybrid",
    "LateInteraction",
    "LateInteractionRetrieval",
    "Sparse",
    "SparseRetrieval",
    "bm25_searcher",
    "dense_search",
    "fuse",
    "normalized_interpolation",
    "reciprocal_rank_fusion",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from embedkit.search.bm25 import Bm25sSearcher, bm25_searcher
    from embedkit.search.chunks import Aggregation
    from embedkit.search.dense import DenseRetrieval, dense_search
    from embedkit.search.fusion import fuse, normalized_interpolation, reciprocal_rank_fusion
    from embedkit.search.late_interaction import LateInteractionRetrieval
    from embedkit.search.retriever import BM25, Dense, Fusion, Hybrid, LateInteraction, Sparse
    from embedkit.search.sparse import SparseRetrieval
