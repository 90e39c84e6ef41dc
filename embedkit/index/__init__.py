"""Stage 4: indexes of every family behind one protocol (``open_index``): FAISS from any factory string (on GPU when
present, in pyserini's layout), exact and approximate sparse and multi-vector engines, a living index over them."""

from typing import TYPE_CHECKING

from embedkit._lazy import lazy_exports

_EXPORTS = {
    "BuildSettings": "embedkit.index.faiss_helpers",
    "Index": "embedkit.index.faiss_index",
    "LiveIndex": "embedkit.index.live",
    "PartitionedIndex": "embedkit.index.partitioned",
    "ShardedIndex": "embedkit.index.partitioned",
    "Vectors": "embedkit.index.vectors",
    "check_factory": "embedkit.index.factory_check",
    "load_index": "embedkit.index.partitioned",
    "open_index": "embedkit.index.registry",
    "register_engine": "embedkit.index.registry",
}
__all__ = [
    "BuildSettings",
    "Index",
    "LiveIndex",
    "PartitionedIndex",
    "ShardedIndex",
    "Vectors",
    "check_factory",
    "load_index",
    "open_index",
    "register_engine",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from embedkit.index.factory_check import check_factory
    from embedkit.index.faiss_helpers import BuildSettings
    from embedkit.index.faiss_index import Index
    from embedkit.index.live import LiveIndex
    from embedkit.index.partitioned import PartitionedIndex, ShardedIndex, load_index
    from embedkit.index.registry import open_index, register_engine
    from embedkit.index.vectors import Vectors
