"""Building a FAISS index from ``Vectors``: the one builder behind ``Index.build``, folder builds, on-disk blocks and
partitions.

Training reads a seeded sample drawn across the vectors (memory-mapped shard files or one array), and adding reads one
batch of one part at a time, so memory holds the sample, one batch and the index, never the whole corpus. The same
``seed`` and ``train_size`` train on the same rows whatever the vectors are split into, so the indexes are equal.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from embedkit.errors import EmbedkitError
from embedkit.index.factory_check import check_factory
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


def finite_rows(batch: np.ndarray, first: int | None, path: Path | None) -> None:
    """Refuse NaN or infinite vectors (FAISS would index them and rank NaN scores without a word); ``first``: the
    batch's first row number (``None``: a sample, not contiguous rows)."""
    bad = ~np.isfinite(batch).all(axis=1)
    if bad.any():
        which = "a vector" if first is None else f"vector {first + int(np.argmax(bad))}"
        raise EmbedkitError(f"{which} holds NaN or infinity", path=path, field="embeddings")


Trained = tuple[faiss.Index, int]  # an empty trained index, and the number of vectors it trained on (0: untrained)


def train_index(vectors: Vectors, settings: BuildSettings) -> Trained:
    """An empty CPU index trained once on a sample across all rows; shared by every block of an on-disk index and
    every partition of a partitioned one, so all use one quantizer."""
    count = min(settings.train_size, len(vectors))  # k-means needs as many vectors as clusters: one line, not FAISS's
    check_factory(settings.factory, vectors.dim, metric=settings.metric, count=count, build=False)
    index = new_index(vectors.dim, settings.factory, settings.metric)
    if index.is_trained:
        return index, 0
    sample = vectors.sample(settings.train_size, settings.seed)
    finite_rows(sample, None, vectors.path)
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
    digest = hashlib.sha256()  # of the rows added: what rescoring later checks its float vectors against
    for first, batch in vectors.batches(start, stop, settings.add_batch_size):
        finite_rows(batch, first, vectors.path)
        digest.update(batch.tobytes())
        index.add(binarize(batch) if settings.binary else batch)
    record = vectors.record(start, stop, rows_sha256=digest.hexdigest())
    meta = index_meta(settings, vectors.dim, stop - start, trained[1], vectors.settings, **record, **extra)
    return index, vectors.ids(start, stop), meta
