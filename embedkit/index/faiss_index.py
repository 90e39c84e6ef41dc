"""``Index``: a FAISS index plus its document ids, built from any ``index_factory`` string.

On disk it is pyserini's layout (a FAISS file ``index`` and a ``docid`` file, one id per line) plus ``meta.json``,
so pyserini's ``FaissSearcher`` opens embedkit indexes and embedkit opens pyserini's.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from embedkit.errors import EmbedkitError
from embedkit.report.environment import library_versions
from embedkit.storage import write_json, write_lines

logger = logging.getLogger(__name__)

METRICS = {"ip": faiss.METRIC_INNER_PRODUCT, "l2": faiss.METRIC_L2}
FORMAT = "embedkit.index/1"
# The settings of a model that must agree between the index and the queries searched against it.
MODEL_IDENTITY = ("model", "weights_sha256", "pooling", "normalize", "dim", "max_length", "document_prompt")


def _gpu_count() -> int:
    return faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0


def _to_gpu(index: faiss.Index) -> faiss.Index:
    """Clone to all GPUs FAISS sees; keep the CPU index where the type has no GPU version."""
    if _gpu_count() == 0:
        return index
    try:
        return faiss.index_cpu_to_all_gpus(index)
    except (RuntimeError, AttributeError) as err:
        logger.warning("keeping the index on CPU: %s", err)
        return index


def _to_cpu(index: faiss.Index) -> faiss.Index:
    return faiss.index_gpu_to_cpu(index) if _gpu_count() and hasattr(faiss, "index_gpu_to_cpu") else index


def _faiss_reason(err: RuntimeError) -> str:
    """The last clause of a FAISS C++ error, without the source location."""
    return str(err).strip().splitlines()[-1].rsplit(": ", 1)[-1]


def _as_matrix(vectors: np.ndarray, name: str) -> np.ndarray:
    vectors = np.asarray(vectors)
    if vectors.ndim != 2:
        raise EmbedkitError(f"{name} must be a 2-d array, got shape {vectors.shape}")
    return np.ascontiguousarray(vectors, dtype=np.float32)


class Index:
    """A FAISS index with string document ids and the settings it was built and is searched with."""

    def __init__(self, index: faiss.Index, ids: list[str], meta: dict[str, Any]) -> None:
        if index.ntotal != len(ids):
            raise EmbedkitError(f"the index holds {index.ntotal} vectors but {len(ids)} document ids were given")
        self.faiss_index = index
        self.ids = ids
        self.meta = meta
        self.search_params: dict[str, int] = dict(meta.get("search_params") or {})

    @property
    def dim(self) -> int:
        return int(self.faiss_index.d)

    def __len__(self) -> int:
        return int(self.faiss_index.ntotal)

    @classmethod
    def build(
        cls,
        embeddings: np.ndarray,
        ids: list[str],
        factory: str = "Flat",
        metric: str = "ip",
        *,
        train_size: int = 1_000_000,
        add_batch_size: int = 100_000,
        use_gpu: bool = True,
        seed: int = 0,
        model_settings: dict[str, Any] | None = None,
        nprobe: int | None = None,
        ef_search: int | None = None,
    ) -> Index:
        """Build from vectors and ids; trains on a seeded sample of ``train_size`` vectors if the type needs it."""
        embeddings = _as_matrix(embeddings, "embeddings")
        if len(embeddings) != len(ids):
            raise EmbedkitError(f"{len(embeddings)} vectors but {len(ids)} document ids")
        if metric not in METRICS:
            raise EmbedkitError(f"unknown metric '{metric}' (choose from {', '.join(METRICS)})", field="metric")
        try:
            index = faiss.index_factory(embeddings.shape[1], factory, METRICS[metric])
        except RuntimeError as err:
            raise EmbedkitError(
                f"FAISS cannot build factory string '{factory}': {_faiss_reason(err)}", field="factory"
            ) from None
        if use_gpu:
            index = _to_gpu(index)
        trained_on = 0
        if not index.is_trained:
            sample = embeddings
            if len(embeddings) > train_size:
                rows = np.random.default_rng(seed).choice(len(embeddings), train_size, replace=False)
                sample = embeddings[np.sort(rows)]
            try:
                index.train(sample)
            except RuntimeError as err:
                raise EmbedkitError(
                    f"training '{factory}' on {len(sample)} vectors failed: {_faiss_reason(err)}"
                ) from None
            trained_on = len(sample)
        for start in range(0, len(embeddings), add_batch_size):
            index.add(embeddings[start : start + add_batch_size])
        meta = {
            "format": FORMAT,
            "factory": factory,
            "metric": metric,
            "dim": int(embeddings.shape[1]),
            "count": len(ids),
            "trained_on": trained_on,
            "seed": seed,
            "model": model_settings,
            "search_params": {},
            "library_versions": library_versions(),
        }
        built = cls(index, list(ids), meta)
        built.set_search_params(nprobe=nprobe, ef_search=ef_search)
        return built

    def set_search_params(self, nprobe: int | None = None, ef_search: int | None = None) -> None:
        """Set IVF ``nprobe`` / HNSW ``efSearch`` (also through OPQ or other pre-transforms); kept in ``meta.json``."""
        for name, value in (("nprobe", nprobe), ("efSearch", ef_search)):
            if value is None:
                continue
            space = faiss.GpuParameterSpace() if _gpu_count() and hasattr(faiss, "GpuParameterSpace") else None
            space = space or faiss.ParameterSpace()
            try:
                space.set_index_parameter(self.faiss_index, name, int(value))
            except RuntimeError:
                raise EmbedkitError(
                    f"index '{self.meta.get('factory')}' has no search parameter '{name}'", field=name
                ) from None
            self.search_params[name] = int(value)
        self.meta["search_params"] = dict(self.search_params)

    def search(
        self,
        queries: np.ndarray,
        k: int = 10,
        *,
        nprobe: int | None = None,
        ef_search: int | None = None,
        batch_size: int = 4096,
    ) -> tuple[np.ndarray, list[list[str]]]:
        """Top-``k`` scores and document ids per query row (fewer than ``k`` where the index has fewer hits)."""
        queries = _as_matrix(queries, "queries")
        if queries.shape[1] != self.dim:
            raise EmbedkitError(
                f"query dimension {queries.shape[1]} does not match the index dimension {self.dim}", field="dim"
            )
        self.set_search_params(nprobe=nprobe, ef_search=ef_search)
        k = min(k, len(self))
        scores = np.empty((len(queries), k), dtype=np.float32)
        labels = np.empty((len(queries), k), dtype=np.int64)
        for start in range(0, len(queries), batch_size):
            stop = start + batch_size
            scores[start:stop], labels[start:stop] = self.faiss_index.search(queries[start:stop], k)
        hits = [[self.ids[j] for j in row if j >= 0] for row in labels]
        return scores, hits

    def check_model(self, settings: dict[str, Any]) -> None:
        """Refuse to search with a model other than the one that built the index."""
        built_with = self.meta.get("model")
        if not built_with:
            return
        differs = [key for key in MODEL_IDENTITY if built_with.get(key) != settings.get(key)]
        if differs:
            detail = ", ".join(f"{key}: index {built_with.get(key)!r}, model {settings.get(key)!r}" for key in differs)
            raise EmbedkitError(f"the index was built with another model ({detail})")

    def save(self, path: str | Path) -> Path:
        """Write ``index``, ``docid`` and ``meta.json`` into a new folder, atomically replacing any old one."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
        try:
            faiss.write_index(_to_cpu(self.faiss_index), str(tmp / "index"))
            write_lines(tmp / "docid", self.ids)
            write_json(tmp / "meta.json", self.meta)
            if path.exists():
                shutil.rmtree(path)
            os.replace(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return path

    @classmethod
    def load(cls, path: str | Path, use_gpu: bool = True, model_settings: dict[str, Any] | None = None) -> Index:
        """Open an embedkit or pyserini index folder; check ids, vectors and (optionally) the model agree."""
        path = Path(path)
        if not path.is_dir():
            raise EmbedkitError("no such index folder", path=path)
        for name in ("index", "docid"):
            if not (path / name).is_file():
                raise EmbedkitError(f"the index folder has no '{name}' file", path=path)
        meta: dict[str, Any] = {}
        if (path / "meta.json").is_file():
            try:
                meta = json.loads((path / "meta.json").read_text())
            except json.JSONDecodeError as err:
                raise EmbedkitError(f"malformed JSON ({err.msg})", path=path / "meta.json", line=err.lineno) from None
        index = faiss.read_index(str(path / "index"))
        ids = (path / "docid").read_text(encoding="utf-8").splitlines()
        if index.ntotal != len(ids):
            raise EmbedkitError(f"'index' holds {index.ntotal} vectors but 'docid' lists {len(ids)} ids", path=path)
        if meta.get("dim") not in (None, index.d):
            raise EmbedkitError(f"meta.json says dim {meta['dim']}, the index has {index.d}", path=path, field="dim")
        meta.setdefault("format", FORMAT)
        meta.setdefault("dim", int(index.d))
        meta.setdefault("count", len(ids))
        loaded = cls(_to_gpu(index) if use_gpu else index, ids, meta)
        if loaded.search_params:
            loaded.set_search_params(loaded.search_params.get("nprobe"), loaded.search_params.get("efSearch"))
        if model_settings is not None:
            loaded.check_model(model_settings)
        return loaded
