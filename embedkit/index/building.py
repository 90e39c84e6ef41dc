"""Building a FAISS index from ``Vectors``: the one builder behind ``Index.build``, folder builds, on-disk blocks and
partitions.

Training reads a seeded sample drawn across the vectors (memory-mapped shard files or one array), and adding reads one
batch of one part at a time, so memory holds the sample, one batch and the index, never the whole corpus. The same
``seed`` and ``train_size`` train on the same rows whatever the vectors are split into, so the indexes are equal.
"""

from __future__ import annotations

from typing import Any

import faiss

from embedkit.errors import EmbedkitError
from embedkit.index.faiss_helpers import (
    BuildSettings,
    binarize,
    faiss_reason,
    index_meta,
    new_index,
    to_cpu,
    to_gpu,
)
from embedkit.index.vectors import Vectors

Trained = tuple[faiss.Index, int]  # an empty trained index, and the number of vectors it trained on (0: untrained)


def train_index(vectors: Vectors, settings: BuildSettings) -> Trained:
    """An empty CPU index trained once on a sample across all rows; shared by every block of an on-disk index and
    every partition of a partitioned one, so all use one quantizer."""
    index = new_index(vectors.dim, settings.factory, settings.metric)
    if index.is_trained:
        return index, 0
    sample = vectors.sample(settings.train_size, settings.seed)
    if settings.binary:
        sample = binarize(sample)
    device_index = to_gpu(index) if settings.use_gpu and not settings.binary else index
    try:
        device_index.train(sample)
    except RuntimeError as err:
        raise EmbedkitError(
            f"training '{settings.factory}' on {len(sample)} vectors failed: {faiss_reason(err)}"
        ) from None
    return (to_cpu(device_index) if device_index is not index else index), len(sample)


def build_faiss(
    vectors: Vectors,
    settings: BuildSettings,
    start: int = 0,
    stop: int | None = None,
    trained: Trained | None = None,
    **extra: Any,
) -> tuple[faiss.Index, list[str], dict[str, Any]]:
    """A FAISS index of rows ``start:stop``, their ids and its ``meta.json`` (``extra`` keys added); ``trained``
    (from ``train_index``) reuses a quantizer trained before."""
    settings.check()
    stop = len(vectors) if stop is None else stop
    trained = trained or train_index(vectors, settings)
    index = (faiss.clone_binary_index if settings.binary else faiss.clone_index)(trained[0])
    if settings.use_gpu and not settings.binary:
        index = to_gpu(index)
    for _, batch in vectors.batches(start, stop, settings.add_batch_size):
        index.add(binarize(batch) if settings.binary else batch)
    meta = index_meta(
        settings, vectors.dim, stop - start, trained[1], vectors.settings, **vectors.record(start, stop), **extra
    )
    return index, vectors.ids(start, stop), meta
