"""embedkit: neural retrieval (dense, learned sparse, late interaction), from corpus to encoder to index to report.

The public names load on first use (PEP 562), so ``import embedkit`` and ``embedkit --help`` stay fast and do not
pull in torch, FAISS or sentence-transformers until a stage that needs them is touched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from embedkit._lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "BeirDataset": "embedkit.data",
    "load_dataset": "embedkit.data",
    "Chunking": "embedkit.models",
    "EmbeddingsFolder": "embedkit.encode",
    "encode_to_folder": "embedkit.encode",
    "EmbedkitError": "embedkit.errors",
    "compute_metrics": "embedkit.evaluation",
    "evaluate": "embedkit.evaluation",
    "EvaluateOptions": "embedkit.evaluation",
    "BM25": "embedkit.search",
    "Dense": "embedkit.search",
    "Fusion": "embedkit.search",
    "Hybrid": "embedkit.search",
    "Index": "embedkit.index",
    "LiveIndex": "embedkit.index",
    "open_index": "embedkit.index",
    "Hits": "embedkit.protocols",
    "LateInteraction": "embedkit.search",
    "Sparse": "embedkit.search",
    "PartitionedIndex": "embedkit.index",
    "ShardedIndex": "embedkit.index",
    "load_index": "embedkit.index",
    "EmbeddingModel": "embedkit.models",
    "load_model": "embedkit.models",
    "dense_search": "embedkit.search",
    "read_run": "embedkit.data",
    "RerankSettings": "embedkit.reranking",
    "rerank": "embedkit.reranking",
    "write_run": "embedkit.data",
}

__all__ = [
    "BM25",
    "BeirDataset",
    "Chunking",
    "Dense",
    "EmbeddingModel",
    "EmbeddingsFolder",
    "EmbedkitError",
    "EvaluateOptions",
    "Fusion",
    "Hits",
    "Hybrid",
    "Index",
    "LateInteraction",
    "LiveIndex",
    "PartitionedIndex",
    "RerankSettings",
    "ShardedIndex",
    "Sparse",
    "__version__",
    "compute_metrics",
    "dense_search",
    "encode_to_folder",
    "evaluate",
    "load_dataset",
    "load_index",
    "load_model",
    "open_index",
    "read_run",
    "rerank",
    "write_run",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from embedkit.data import BeirDataset, load_dataset, read_run, write_run
    from embedkit.encode import EmbeddingsFolder, encode_to_folder
    from embedkit.errors import EmbedkitError
    from embedkit.evaluation import EvaluateOptions, compute_metrics, evaluate
    from embedkit.index import Index, LiveIndex, PartitionedIndex, ShardedIndex, load_index, open_index
    from embedkit.models import Chunking, EmbeddingModel, load_model
    from embedkit.protocols import Hits
    from embedkit.reranking import RerankSettings, rerank
    from embedkit.search import BM25, Dense, Fusion, Hybrid, LateInteraction, Sparse, dense_search
