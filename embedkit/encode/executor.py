"""Who encodes the shard files an encode is missing: this process, or a cluster (``ray_executor``).

``encode_to_folder`` owns the folder, its lock and its manifest; an executor only turns pending shard indexes into
committed shard files (``shards.commit_shard``) and yields their manifest entries as they finish, in any order.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from embedkit.encode.shards import commit_shard, shard_rows

if TYPE_CHECKING:
    from embedkit.models.embedding_model import EmbeddingModel


class ShardExecutor(Protocol):
    def encode_shards(
        self,
        model: EmbeddingModel,
        corpus: Any,
        folder: Path,
        pending: list[int],
        shard_size: int,
        progress: Any,
    ) -> Iterator[dict[str, Any]]:
        """Encode and commit each of ``pending``; yield each one's manifest entry, advancing ``progress`` by docs."""
        ...


class InProcess:
    """The shards one after another, with the model already loaded here."""

    def encode_shards(
        self,
        model: EmbeddingModel,
        corpus: Any,
        folder: Path,
        pending: list[int],
        shard_size: int,
        progress: Any,
    ) -> Iterator[dict[str, Any]]:
        for index in pending:
            ids, texts = shard_rows(corpus, index * shard_size, min(len(corpus), (index + 1) * shard_size))
            if getattr(model, "chunking", None) is not None:
                yield commit_shard(folder, index, ids, model.encode_chunks(texts, progress=progress))
            else:
                yield commit_shard(folder, index, ids, model.encode_documents(texts, progress=progress))
