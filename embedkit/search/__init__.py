"""Stage 5: queries into a ``Run``: dense search over an index, BM25, fusion of runs; TREC run files in and out."""

from embedkit.search.bm25 import Bm25sSearcher, bm25_searcher
from embedkit.search.dense import DenseSearcher, dense_search
from embedkit.search.fusion import fuse, normalized_interpolation, reciprocal_rank_fusion
from embedkit.search.trec import read_run, write_run

__all__ = [
    "Bm25sSearcher",
    "DenseSearcher",
    "bm25_searcher",
    "dense_search",
    "fuse",
    "normalized_interpolation",
    "read_run",
    "reciprocal_rank_fusion",
    "write_run",
]
