"""FAISS helpers and index file I/O shared by every index module (the leaf of ``embedkit.index``).

``Index``, the folder builders, the on-disk IVF and partitioned indexes all import from here and never from each
other's internals, so the package has no import cycle.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from embedkit.environment import library_versions
from embedkit.errors import EmbedkitError
from embedkit.storage import read_json, read_lines, sha256_file

logger = logging.getLogger(__name__)

METRICS = {"ip": faiss.METRIC_INNER_PRODUCT, "l2": faiss.METRIC_L2}
FORMAT = "embedkit.index/1"
PARTITIONED_FORMAT = "embedkit.partitioned-index/1"
PARTITIONED_FORMATS = (PARTITIONED_FORMAT, "embedkit.sharded-index/1")  # the second: written before 0.2
INDEX_KINDS = ("index", "partitioned-index", "sharded-index")  # what an index folder may replace (--overwrite)
IVFDATA = "index.ivfdata"
# The settings of a model that must agree between the index and the queries searched against it.
MODEL_IDENTITY = ("model", "weights_sha256", "pooling", "normalize", "dim", "max_length", "document_prompt")


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
        if self.metric not in METRICS:
            raise EmbedkitError(f"unknown metric '{self.metric}' (choose from {', '.join(METRICS)})", field="metric")
        for name in ("train_size", "add_batch_size"):
            if getattr(self, name) < 1:
                raise EmbedkitError(f"must be at least 1, not {getattr(self, name)}", field=name)
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


def as_matrix(vectors: np.ndarray, name: str) -> np.ndarray:
    vectors = np.asarray(vectors)
    if vectors.ndim != 2:
        raise EmbedkitError(f"{name} must be a 2-d array, got shape {vectors.shape}")
    return np.ascontiguousarray(vectors, dtype=np.float32)


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
    """An empty CPU index from a factory string (binary for 'B...'), with FAISS's complaint as a user error."""
    if metric not in METRICS:
        raise EmbedkitError(f"unknown metric '{metric}' (choose from {', '.join(METRICS)})", field="metric")
    try:
        if is_binary_factory(factory):
            _check_binary_dim(dim)
            return faiss.index_binary_factory(dim, factory)
        return faiss.index_factory(dim, factory, METRICS[metric])
    except RuntimeError as err:
        raise EmbedkitError(
            f"FAISS cannot build factory string '{factory}': {faiss_reason(err)}", field="factory"
        ) from None


def set_binary_parameter(index: faiss.IndexBinary, name: str, value: int, factory: str | None) -> None:
    """``ParameterSpace`` does not know binary indexes: set IVF ``nprobe`` / HNSW ``efSearch`` directly."""
    inner = faiss.downcast_IndexBinary(index)
    if name == "nprobe" and isinstance(inner, faiss.IndexBinaryIVF):
        inner.nprobe = value
    elif name == "efSearch" and isinstance(inner, faiss.IndexBinaryHNSW):
        inner.hnsw.efSearch = value
    else:
        raise EmbedkitError(f"index '{factory}' has no search parameter '{name}'", field=name)


def unwrap(index: Any) -> Any:
    """The index under pre-transforms (OPQ, PCA, ...) and refinement wrappers."""
    inner = faiss.downcast_index(index)
    while True:
        if isinstance(inner, faiss.IndexPreTransform):
            inner = faiss.downcast_index(inner.index)
        elif isinstance(inner, faiss.IndexRefine):
            inner = faiss.downcast_index(inner.base_index)
        else:
            return inner


def current_search_param(index: Any, name: str) -> int:
    """The ``nprobe`` or ``efSearch`` FAISS searches ``index`` with now (set or default)."""
    if isinstance(index, faiss.IndexBinary):
        inner = faiss.downcast_IndexBinary(index)
        owner = inner if name == "nprobe" else getattr(inner, "hnsw", None)
    else:
        ivf = faiss.try_extract_index_ivf(index)
        inner = unwrap(index)
        if name == "nprobe":
            owner = ivf if ivf is not None else inner  # a GPU IVF index has nprobe itself
        else:
            hnsw_owner = inner if hasattr(inner, "hnsw") else None
            if hnsw_owner is None and ivf is not None:  # IVF with an HNSW coarse quantizer
                quantizer = faiss.downcast_index(ivf.quantizer)
                hnsw_owner = quantizer if hasattr(quantizer, "hnsw") else None
            owner = getattr(hnsw_owner, "hnsw", None)
    value = getattr(owner, "nprobe" if name == "nprobe" else "efSearch", None)
    if value is None:
        raise EmbedkitError(f"the index has no search parameter '{name}'", field=name)
    return int(value)


def check_model_settings(built_with: dict[str, Any], settings: dict[str, Any]) -> None:
    """Refuse query vectors from a model other than the one that encoded the documents (``MODEL_IDENTITY``)."""
    differs = [key for key in MODEL_IDENTITY if built_with.get(key) != settings.get(key)]
    if differs:
        detail = ", ".join(f"{key}: index {built_with.get(key)!r}, model {settings.get(key)!r}" for key in differs)
        raise EmbedkitError(f"the index was built with another model ({detail})")


def check_rescore(rescore: int) -> int:
    if int(rescore) != rescore or rescore < 0:
        raise EmbedkitError(f"rescore must be a whole number >= 0 (0 = off), got {rescore}", field="rescore")
    return int(rescore)


def read_meta(path: Path) -> dict[str, Any]:
    """An index folder's ``meta.json`` (empty for a pyserini folder without one)."""
    if not (path / "meta.json").is_file():
        return {}
    meta = read_json(path / "meta.json")
    if not isinstance(meta, dict):
        raise EmbedkitError("expected a JSON object", path=path / "meta.json")
    return meta


def is_partitioned(path: str | Path) -> bool:
    """Whether ``path`` is a partitioned index folder (by its meta.json)."""
    return read_meta(Path(path)).get("format") in PARTITIONED_FORMATS


@contextmanager
def quiet_faiss() -> Iterator[None]:
    """Drop what FAISS's on-disk lists print to the C stdout ("resizing ...", "updating ondisk filename ..."),
    which would otherwise end up in the CLI's output; a no-op where the C library cannot be reached."""
    try:
        libc = ctypes.CDLL(None)
        saved = os.dup(1)
    except (OSError, AttributeError, TypeError):
        yield
        return
    sys.stdout.flush()
    libc.fflush(None)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        libc.fflush(None)
        os.dup2(saved, 1)
        os.close(saved)


def ondisk_lists(index: faiss.Index) -> Any:
    """The ``OnDiskInvertedLists`` of an IVF index (through OPQ and other pre-transforms), else ``None``."""
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None:
        return None
    lists = faiss.downcast_InvertedLists(ivf.invlists)
    return lists if isinstance(lists, faiss.OnDiskInvertedLists) else None


def read_index_file(path: Path, binary: bool = False, on_disk: bool = False) -> faiss.Index | faiss.IndexBinary:
    """Read a FAISS file; an on-disk index's lists are mapped (read-only) from the ``.ivfdata`` beside it, wherever
    the folder lies and whatever the cwd. A file FAISS cannot read is a user error naming it."""
    try:
        if binary:
            return faiss.read_index_binary(str(path))
        if not on_disk and not (path.parent / IVFDATA).exists():
            return faiss.read_index(str(path), faiss.IO_FLAG_ONDISK_SAME_DIR)
        with quiet_faiss():
            flags = faiss.IO_FLAG_ONDISK_SAME_DIR | (faiss.IO_FLAG_READ_ONLY if on_disk else 0)
            return faiss.read_index(str(path), flags)
    except RuntimeError as err:
        raise EmbedkitError(f"not a readable FAISS index ({faiss_reason(err)})", path=path) from None


def read_index_folder(path: Path) -> tuple[faiss.Index | faiss.IndexBinary, list[str], dict[str, Any]]:
    """The FAISS index, ids and meta.json of an embedkit or pyserini index folder, checksums and counts checked."""
    if not path.is_dir():
        raise EmbedkitError("no such index folder", path=path)
    if not (path / "index").exists() and is_partitioned(path):
        raise EmbedkitError("a partitioned index folder: open it with embedkit.index.load_index", path=path)
    for name in ("index", "docid"):
        if not (path / name).is_file():
            raise EmbedkitError(f"the index folder has no '{name}' file", path=path)
    meta = read_meta(path)
    for name, digest in (meta.get("files") or {}).items():
        if sha256_file(path / name) != digest:
            raise EmbedkitError(
                "changed since it was written (its sha256 differs from meta.json); rebuild the index", path=path / name
            )
    # an on-disk index's lists are mapped from the index.ivfdata beside 'index', whatever the cwd
    index = read_index_file(path / "index", binary=bool(meta.get("binary")), on_disk=bool(meta.get("on_disk")))
    ids = read_lines(path / "docid")
    if index.ntotal != len(ids):
        raise EmbedkitError(f"'index' holds {index.ntotal} vectors but 'docid' lists {len(ids)} ids", path=path)
    if meta.get("dim") not in (None, index.d):
        raise EmbedkitError(f"meta.json says dim {meta['dim']}, the index has {index.d}", path=path, field="dim")
    meta.setdefault("format", FORMAT)
    meta.setdefault("dim", int(index.d))
    meta.setdefault("count", len(ids))
    return index, ids, meta


def write_index_file(index: faiss.Index | faiss.IndexBinary, folder: Path, final_folder: Path) -> None:
    """Write ``folder/index``; for an on-disk index also put its ``index.ivfdata`` beside it.

    The data file is hard-linked where possible (it is opened read-only, so the copies never diverge) and the header
    records the path it will have once ``folder`` is renamed to ``final_folder`` (pyserini opens it from any cwd
    while the folder stays put; embedkit finds it beside ``index`` wherever the folder moves).
    """
    if isinstance(index, faiss.IndexBinary):
        faiss.write_index_binary(index, str(folder / "index"))
        return
    index = to_cpu(index)
    lists = ondisk_lists(index)
    if lists is None:
        faiss.write_index(index, str(folder / "index"))
        return
    source = Path(lists.filename)
    if source.resolve() != (folder / IVFDATA).resolve():  # a new on-disk index has written its lists there already
        try:
            os.link(source, folder / IVFDATA)
        except OSError:
            shutil.copyfile(source, folder / IVFDATA)
    lists.filename = str(final_folder.resolve() / IVFDATA)
    try:
        faiss.write_index(index, str(folder / "index"))
    finally:
        lists.filename = str(source)
