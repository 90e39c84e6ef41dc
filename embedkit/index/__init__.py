"""Stage 4: FAISS indexes from any factory string, on GPU when present, saved in pyserini's layout."""

from embedkit.index.faiss_index import Index
from embedkit.index.sharded import ShardedIndex, load_index

__all__ = ["Index", "ShardedIndex", "load_index"]
