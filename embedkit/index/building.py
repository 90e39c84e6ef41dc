"""Indexes from an embeddings folder without loading it whole.

Training reads a seeded sample drawn across the memory-mapped shards (the same rows ``Index.build`` samples from
the concatenated vectors), and adding reads one batch of one shard at a time, so memory holds the sample, one batch
and the index, never the whole corpus.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from embedkit.encode.folder import EmbeddingsFolder
from embedkit.environment import library_versions
from embedkit.errors import EmbedkitError
from embedkit.index.faiss_index import (
    FORMAT,
    METRICS,
    Index,
    _faiss_reason,
    _to_cpu,
    _to_gpu,
    binarize,
    is_binary_factory,
)
from embedkit.index.rescore import FloatVectors


class FolderVectors:
    """The vectors of an embeddings folder as one row space over its memory-mapped shards."""

    def __init__(
        self,
        shards: list[tuple[list[str], np.ndarray]],
        settings: dict[str, Any] | None = None,
        path: Path | None = None,
    ) -> None:
        if not shards:
            raise EmbedkitError("the embeddings folder has no shards")
        dims = {int(vectors.shape[1]) for _, vectors in shards if vectors.ndim == 2}
        if len(dims) != 1 or any(vectors.ndim != 2 or len(vectors) != len(ids) for ids, vectors in shards):
            raise EmbedkitError("the embedding shards disagree in dimension or do not match their docid files")
        self.shards = shards
        self.settings = settings
        self.path = path
        self.dim = dims.pop()
        self.starts = np.cumsum([0] + [len(ids) for ids, _ in shards])
        self.floats = FloatVectors([vectors for _, vectors in shards], path)  # gathers and samples rows

    @classmethod
    def open(cls, folder: EmbeddingsFolder) -> FolderVectors:
        """Memory-map every shard of a complete folder (refuses a partial one: its index would miss documents)."""
        if not folder.complete:
            raise EmbedkitError(
                "the embeddings are incomplete; rerun 'embedkit encode' to finish them", path=folder.path
            )
        return cls(list(folder.iter_shards()), folder.settings, Path(folder.path))

    def __len__(self) -> int:
        return int(self.starts[-1])

    def pieces(self, start: int, stop: int) -> Iterator[tuple[int, int, int]]:
        """``(shard, first, last)`` row ranges local to each shard that ``start:stop`` crosses."""
        for shard in range(len(self.shards)):
            lo, hi = max(start, int(self.starts[shard])), min(stop, int(self.starts[shard + 1]))
            if lo < hi:
                yield shard, lo - int(self.starts[shard]), hi - int(self.starts[shard])

    def ids(self, start: int = 0, stop: int | None = None) -> list[str]:
        stop = len(self) if stop is None else stop
        return [doc for shard, lo, hi in self.pieces(start, stop) for doc in self.shards[shard][0][lo:hi]]

    def batches(self, start: int, stop: int, batch_size: int) -> Iterator[tuple[int, np.ndarray]]:
        """``(first global row, float32 batch)``, each batch read from one shard only."""
        for shard, lo, hi in self.pieces(start, stop):
            vectors = self.shards[shard][1]
            for first in range(lo, hi, batch_size):
                last = min(hi, first + batch_size)
                yield int(self.starts[shard]) + first, np.ascontiguousarray(vectors[first:last], dtype=np.float32)

    def range_meta(self, start: int, stop: int) -> dict[str, Any]:
        """What meta.json records of the rows an index holds: ``rows`` for part of the folder; for all of it the
        folder itself (``vectors``, as ``Index.attach_vectors`` records it), where rescoring reads the floats."""
        if (start, stop) != (0, len(self)):
            return {"rows": [start, stop]}
        return {} if self.path is None else {"vectors": {"path": str(self.path.resolve()), "count": len(self)}}

    def sample(self, train_size: int, seed: int) -> np.ndarray:
        """The rows ``Index.build`` would train on: a seeded ``train_size`` sample, or everything if smaller."""
        return self.floats.sample(train_size, seed)


def new_index(dim: int, factory: str, metric: str) -> faiss.Index | faiss.IndexBinary:
    """An empty CPU index from a factory string (binary for 'B...'), with FAISS's complaint as a user error."""
    if metric not in METRICS:
        raise EmbedkitError(f"unknown metric '{metric}' (choose from {', '.join(METRICS)})", field="metric")
    try:
        if is_binary_factory(factory):
            return faiss.index_binary_factory(dim, factory)
        return faiss.index_factory(dim, factory, METRICS[metric])
    except RuntimeError as err:
        raise EmbedkitError(
            f"FAISS cannot build factory string '{factory}': {_faiss_reason(err)}", field="factory"
        ) from None


def train_index(
    vectors: FolderVectors,
    factory: str,
    metric: str = "ip",
    *,
    train_size: int = 1_000_000,
    seed: int = 0,
    use_gpu: bool = True,
) -> tuple[faiss.Index, int]:
    """An empty CPU index trained once on a sample across all shards, and the sample size (0: needs no training).

    Shared by every block of an on-disk index and every shard of a sharded one, so all use one quantizer.
    """
    index = new_index(vectors.dim, factory, metric)
    if index.is_trained:
        return index, 0
    sample = vectors.sample(train_size, seed)
    if is_binary_factory(factory):
        sample = binarize(sample)
    device_index = _to_gpu(index) if use_gpu and not is_binary_factory(factory) else index
    try:
        device_index.train(sample)
    except RuntimeError as err:
        raise EmbedkitError(f"training '{factory}' on {len(sample)} vectors failed: {_faiss_reason(err)}") from None
    return (_to_cpu(device_index) if device_index is not index else index), len(sample)


def index_meta(
    factory: str,
    metric: str,
    dim: int,
    count: int,
    trained_on: int,
    seed: int,
    model_settings: dict[str, Any] | None,
    **extra: Any,
) -> dict[str, Any]:
    """``meta.json`` as ``Index.build`` writes it, plus ``extra`` keys."""
    return {
        "format": FORMAT,
        "factory": factory,
        "metric": metric,
        "binary": is_binary_factory(factory),
        "dim": dim,
        "count": count,
        "trained_on": trained_on,
        "seed": seed,
        "model": model_settings,
        "search_params": {},
        "library_versions": library_versions(),
        **extra,
    }


def build_from_folder(
    folder: EmbeddingsFolder | FolderVectors,
    factory: str = "Flat",
    metric: str = "ip",
    *,
    train_size: int = 1_000_000,
    add_batch_size: int = 100_000,
    use_gpu: bool = True,
    seed: int = 0,
    nprobe: int | None = None,
    ef_search: int | None = None,
    start: int = 0,
    stop: int | None = None,
    trained: tuple[faiss.Index, int] | None = None,
) -> Index:
    """``Index.build`` over rows ``start:stop`` of the folder, streamed from its memory-mapped shards.

    With the same ``seed`` and ``train_size`` it trains on the same rows as ``Index.build`` on the concatenated
    vectors, so the two indexes are equal. ``trained`` (from ``train_index``) reuses a quantizer trained before.
    """
    vectors = folder if isinstance(folder, FolderVectors) else FolderVectors.open(folder)
    stop = len(vectors) if stop is None else stop
    if trained is None:
        trained = train_index(vectors, factory, metric, train_size=train_size, seed=seed, use_gpu=use_gpu)
    binary = is_binary_factory(factory)
    index = (faiss.clone_binary_index if binary else faiss.clone_index)(trained[0])
    if use_gpu and not binary:
        index = _to_gpu(index)
    for _, batch in vectors.batches(start, stop, add_batch_size):
        index.add(binarize(batch) if binary else batch)
    extra = vectors.range_meta(start, stop)
    meta = index_meta(factory, metric, vectors.dim, stop - start, trained[1], seed, vectors.settings, **extra)
    built = Index(index, vectors.ids(start, stop), meta)
    built.set_search_params(nprobe=nprobe, ef_search=ef_search)
    return built
