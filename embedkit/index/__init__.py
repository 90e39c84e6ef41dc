"""Stage 4: FAISS indexes from any factory string, on GPU when present, saved in pyserini's layout."""

from typing import TYPE_CHECKING

from embedkit._lazy import lazy_exports

_EXPORTS = {
    "Index": "embedkit.index.faiss_index",
    "ShardedIndex": "embedkit.index.sharded",
    "load_index": "embedkit.index.sharded",
}
__all__ = [
    "Index",
    "ShardedIndex",
    "load_index",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from embedkit.index.faiss_index import Index
    from embedkit.index.sharded import ShardedIndex, load_index
