"""Stage 3: texts to embeddings, in memory or streamed to a folder of shards with a manifest."""

from embedkit.encode.batching import encode_texts, token_budget_batches
from embedkit.encode.shards import EmbeddingsFolder, encode_to_folder, merge_encoded_parts

__all__ = ["EmbeddingsFolder", "encode_texts", "encode_to_folder", "merge_encoded_parts", "token_budget_batches"]
