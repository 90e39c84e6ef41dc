"""The embeddings cache: one key for a corpus encoded by a model, shared by every stage that needs those vectors.

The key is the model's settings (everything that changes a vector), the corpus content hash (ids and texts as
encoded, not the file's name or folder), the versions of the libraries that change vectors, and ``ENCODE_CODE``, the
version of embedkit's own code that makes vectors (its batching, pooling, chunking, backends): a change there gets a
new number, so vectors cached before it are never reused (``tests/test_encode_code.py`` fails until it does).
Evaluation, mining and the MTEB harness all encode through here, so the same model and corpus are encoded once
between them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedkit.data.beir import BeirDataset
from embedkit.data.resolve import cache_home
from embedkit.encode.executor import ShardExecutor
from embedkit.encode.folder import EmbeddingsFolder
from embedkit.encode.writer import encode_to_folder
from embedkit.environment import vector_library_versions
from embedkit.models.embedding_model import EmbeddingModel
from embedkit.storage import sha256_json

ENCODE_CODE = 2  # embedkit/models/*.py as the vectors come out of them; 1 was the code up to c8ae77e (not in keys)


def embeddings_key(model_settings: dict[str, Any], corpus_sha256: str) -> str:
    """The cache key of a corpus encoded with a model (16 hex digits)."""
    libraries = vector_library_versions()
    return sha256_json({"settings": model_settings, "corpus_sha256": corpus_sha256, "libraries": libraries,
                        "encode_code": ENCODE_CODE})[:16]  # fmt: skip


def default_cache_root() -> Path:
    return cache_home() / "embeddings"


def cached_corpus_embeddings(
    model: EmbeddingModel,
    dataset: BeirDataset,
    cache_root: str | Path | None = None,
    executor: ShardExecutor | None = None,
) -> EmbeddingsFolder:
    """The corpus of ``dataset`` encoded by ``model``: from the cache, or encoded into it (resuming a killed run)."""
    root = Path(cache_root) if cache_root else default_cache_root()
    key = embeddings_key(model.settings, dataset.corpus_sha256)
    folder = root / f"corpus-{key}"
    return encode_to_folder(model, dataset.corpus, folder, corpus_sha256=dataset.corpus_sha256, executor=executor)
