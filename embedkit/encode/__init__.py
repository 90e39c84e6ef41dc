"""Stage 3: texts to embeddings, in memory or streamed to a folder of shards with a manifest."""

from typing import TYPE_CHECKING

from embedkit._lazy import lazy_exports

_EXPORTS = {
    "EmbeddingsFolder": "embedkit.encode.shards",
    "cached_corpus_embeddings": "embedkit.encode.cache",
    "encode_texts": "embedkit.encode.batching",
    "encode_to_folder": "embedkit.encode.shards",
    "merge_encoded_parts": "embedkit.encode.shards",
    "token_budget_batches": "embedkit.encode.batching",
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
    from embedkit.encode.batching import encode_texts, token_budget_batches
    from embedkit.encode.cache import cached_corpus_embeddings
    from embedkit.encode.shards import EmbeddingsFolder, encode_to_folder, merge_encoded_parts
