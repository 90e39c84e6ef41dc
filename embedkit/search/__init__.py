"""Stage 5: queries into a ``Run``: dense search over an index, BM25, fusion of runs."""

from typing import TYPE_CHECKING

from embedkit._lazy import lazy_exports

_EXPORTS = {
    "Bm25sSearcher": "embedkit.search.bm25",
    "DenseSearcher": "embedkit.search.dense",
    "bm25_searcher": "embedkit.search.bm25",
    "dense_search": "embedkit.search.dense",
    "fuse": "embedkit.search.fusion",
    "normalized_interpolation": "embedkit.search.fusion",
    "reciprocal_rank_fusion": "embedkit.search.fusion",
}
__all__ = [
    "Bm25sSearcher",
    "DenseSearcher",
    "bm25_searcher",
    "dense_search",
    "fuse",
    "normalized_interpolation",
    "reciprocal_rank_fusion",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from embedkit.search.bm25 import Bm25sSearcher, bm25_searcher
    from embedkit.search.dense import DenseSearcher, dense_search
    from embedkit.search.fusion import fuse, normalized_interpolation, reciprocal_rank_fusion
