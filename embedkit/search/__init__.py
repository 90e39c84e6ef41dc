"""Stage 5: queries against an index into a ``Run``; TREC run files in and out."""

from embedkit.search.dense import DenseSearcher, dense_search
from embedkit.search.trec import read_run, write_run

__all__ = ["DenseSearcher", "dense_search", "read_run", "write_run"]
