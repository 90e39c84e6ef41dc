"""FAISS helpers shared by every index module (the leaf of ``embedkit.index``).

``Index``, the folder builders, the on-disk IVF and partitioned indexes all import from here (and from
``index_files`` and ``search_params``, which build on it) and never from each other's internals, so the package has
no import cycle.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import faiss
import numpy as np

from embedkit import validation
from embedkit.environment import library_versions
from embedkit.errors import EmbedkitError
from embedkit.index.factory_check import check_factory
from embedkit.index.vectors import finite_matrix
from embedkit.models import encoder

logger = logging.getLogger(__name__)

METRICS = {"ip": faiss.METRIC_INNER_PRODUCT, "l2": faiss.METRIC_L2}
FORMAT = "embedkit.index/1"
PARTITIONED_FORMAT = "embedkit.partitioned-index/1"
PARTITIONED_FORMATS = (PARTITIONED_FORMAT, "embedkit.sharded-index/1")  # the second: written before 0.2
INDEX_KINDS = ("index", "partitioned-index", "sharded-index")  # what an index folder may replace (--overwrite)
IVFDATA = "index.ivfdata"
# The settings of a model that must agree between the index and the queries searched against it.
MODEL_IDENTITY = encoder.DENSE_IDENTITY


@dataclass(frozen=True)
class BuildSettings:
    """How an index is built, shared by every builder and recorded in ``meta.json``."""

    factory: str = "Flat"
    metric: str = "ip"
    train_size: int = 1_000_000  # vectors sampled (seeded) to train IVF/PQ
    add_batch_size: int = 100_000
    use_gpu: bool = True
    seed: int = 0
    nprobe: int | None = None
    ef_search: int | None = None

    def check(self) -> BuildSettings:
        """Refuse what FAISS would crash or hang on: the factory string (parsed), non-finite or out-of-range numbers."""
        if self.metric not in METRICS:
            raise EmbedkitError(f"unknown metric '{self.metric}' (choose from {', '.join(METRICS)})", field="metric")
        check_factory(self.factory, metric=self.metric)
        for name in ("train_size", "add_batch_size", "nprobe", "ef_search"):
            check_whole(getattr(self, name), name, 1)
        check_whole(self.seed, "seed", 0)
        return self

    @property
    def binary(self) -> bool:
        return is_binary_factory(self.factory)


def index_meta(
    settings: BuildSettings, dim: int, count: int, trained_on: int, model_settings: dict | None, **extra: Any
) -> dict[str, Any]:
    """``meta.json`` of an index: how it was built, what it holds, the model that made its vectors."""
    return {
        "format": FORMAT,
        "factory": settings.factory,
        "metric": settings.metric,
        "binary": settings.binary,
        "dim": dim,
        "count": count,
        "trained_on": trained_on,
        "seed": settings.seed,
        "model": model_settings,
        "search_params": {},
        "library_versions": library_versions(),
        **extra,
    }


def gpu_count() -> int:
    return faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0


def to_gpu(index: faiss.Index, split: bool = False) -> faiss.Index:
    """Clone to all GPUs FAISS sees (``split``: spread the vectors over them, ``IndexShards``); keep the CPU index
    where the type has no GPU version."""
    if gpu_count() == 0:
        return index
    try:
        if split and gpu_count() > 1 and hasattr(faiss, "GpuMultipleClonerOptions"):
            options = faiss.GpuMultipleClonerOptions()
            options.shard = True
            return faiss.index_cpu_to_all_gpus(index, co=options)
        return faiss.index_cpu_to_all_gpus(index)
    except (RuntimeError, AttributeError) as err:
        logger.warning("keeping the index on CPU: %s", err)
        return index


def to_cpu(index: faiss.Index) -> faiss.Index:
    return faiss.index_gpu_to_cpu(index) if gpu_count() and hasattr(faiss, "index_gpu_to_cpu") else index


def faiss_reason(err: RuntimeError) -> str:
    """The last clause of a FAISS C++ error, without the source location."""
    return str(err).strip().splitlines()[-1].rsplit(": ", 1)[-1]


def as_matrix(vectors: Any, name: str) -> np.ndarray:
    """A 2-d float32 array of finite numbers (``finite_matrix``): FAISS would rank NaN scores silently."""
    return finite_matrix(vectors, name)


def is_binary_factory(factory: str) -> bool:
    """FAISS's binary factory strings start with 'B' (BFlat, BIVF64, BHNSW32); no float factory string does."""
    return factory.startswith("B")


def _check_binary_dim(dim: int) -> None:
    if dim % 8:
        raise EmbedkitError(
            f"a binary index needs a dimension that is a multiple of 8, the vectors have {dim}", field="dim"
        )


def binarize(vectors: np.ndarray) -> np.ndarray:
    """1 bit per dimension (1 where the value is > 0), packed 8 to a byte as FAISS's binary indexes take them."""
    _check_binary_dim(vectors.shape[1])
    return np.packbits(vectors > 0, axis=1)


def new_index(dim: int, factory: str, metric: str) -> faiss.Index | faiss.IndexBinary:
    """An empty CPU index from a factory string (binary for 'B...'), checked first (``check_factory``: parameters
    that crash FAISS natively never reach it), with FAISS's complaint as a user error."""
    if metric not in METRICS:
        raise EmbedkitError(f"unknown metric '{metric}' (choose from {', '.join(METRICS)})", field="metric")
    check_factory(factory, dim, metric=metric, build=False)
    try:
        if is_binary_factory(factory):
            _check_binary_dim(dim)
            return faiss.index_binary_factory(dim, factory)
        return faiss.index_factory(dim, factory, METRICS[metric])
    except RuntimeError as err:
        raise EmbedkitError(
            f"FAISS cannot build factory string '{factory}': {faiss_reason(err)}", field="factory"
        ) from None


def check_model_settings(built_with: dict[str, Any], settings: dict[str, Any]) -> None:
    """Refuse query vectors from a model other than the one that encoded the documents (``MODEL_IDENTITY``)."""
    encoder.check_model_settings(built_with, settings, MODEL_IDENTITY)


REQUIRED_WHOLE = ("k", "-k")  # None means "not given" for the others
MAX_WHOLE = 2**63 - 1  # what FAISS's C++ parameters (size_t, int64) can hold; larger values are refused


def check_whole(value: Any, field: str, minimum: int, maximum: int | None = MAX_WHOLE) -> int | None:
    """A whole number >= ``minimum`` (``None`` passes: not given); NaN, infinity, 2.5, True and '3' are refused."""
    if value is None and field in REQUIRED_WHOLE:
        raise EmbedkitError(f"must be a whole number >= {minimum}, not None", field=field)
    return validation.check_whole(value, field, minimum=minimum, maximum=maximum)


def check_rescore(rescore: Any) -> int:
    """The rescore factor: a whole number >= 0 (0 = off); how deep it reaches is clamped to the index size."""
    return check_whole(rescore, "rescore", 0)
