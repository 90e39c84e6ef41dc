"""Stage 3: a corpus to an embeddings folder: shard files and a manifest, resumable, cached, split across workers."""

from typing import TYPE_CHECKING

from embedkit._lazy import lazy_exports

_EXPORTS = {
    "EmbeddingsFolder": "embedkit.encode.folder",
    "cached_corpus_embeddings": "embedkit.encode.cache",
    "encode_texts": "embedkit.models.batching",
    "encode_to_folder": "embedkit.encode.writer",
    "merge_encoded_parts": "embedkit.encode.workers",
    "token_budget_batches": "embedkit.models.batching",
}
__all__ = [
    "EmbeddingsFolder",
    "cached_corpus_embeddings",
    "encode_texts",
    "encode_to_folder",
    "merge_encoded_parts",
    "token_budget_batches",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from embedkit.encode.cache import cached_corpus_embeddings
    from embedkit.encode.folder import EmbeddingsFolder
    from embedkit.encode.workers import merge_encoded_parts
    from embedkit.encode.writer import encode_to_folder
    from embedkit.models.batching import encode_texts, token_budget_batches
