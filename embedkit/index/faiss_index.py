"""``Index``: a FAISS index plus its document ids, built from any ``index_factory`` string.

On disk it is pyserini's layout (a FAISS file ``index`` and a ``docid`` file, one id per line) plus ``meta.json``,
so pyserini's ``FaissSearcher`` opens embedkit indexes and embedkit opens pyserini's.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from embedkit.environment import library_versions
from embedkit.errors import EmbedkitError
from embedkit.storage import read_json, read_lines, replace_folder, sha256_file, write_json, write_lines

logger = logging.getLogger(__name__)

METRICS = {"ip": faiss.METRIC_INNER_PRODUCT, "l2": faiss.METRIC_L2}
FORMAT = "embedkit.index/1"
INDEX_KINDS = ("index", "sharded-index")  # what an index folder may replace (with --overwrite)
# The settings of a model that must agree between the index and the queries searched against it.
MODEL_IDENTITY = ("model", "weights_sha256", "pooling", "normalize", "dim", "max_length", "document_prompt")


def _gpu_count() -> int:
    return faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0


def _to_gpu(index: faiss.Index, shard: bool = False) -> faiss.Index:
    """Clone to all GPUs FAISS sees (``shard``: split the vectors among them, ``IndexShards``); keep the CPU index
    where the type has no GPU version."""
    if _gpu_count() == 0:
        return index
    try:
        if shard and _gpu_count() > 1 and hasattr(faiss, "GpuMultipleClonerOptions"):
            options = faiss.GpuMultipleClonerOptions()
            options.shard = True
            return faiss.index_cpu_to_all_gpus(index, co=options)
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


def is_binary_factory(factory: str) -> bool:
    """FAISS's binary factory strings start with 'B' (BFlat, BIVF64, BHNSW32); no float factory string does."""
    return factory.startswith("B")


def binarize(vectors: np.ndarray) -> np.ndarray:
    """1 bit per dimension (1 where the value is > 0), packed 8 to a byte as FAISS's binary indexes take them."""
    if vectors.shape[1] % 8:
        raise EmbedkitError(
            f"a binary index needs a dimension that is a multiple of 8, the vectors have {vectors.shape[1]}",
            field="dim",
        )
    return np.packbits(vectors > 0, axis=1)


def _set_binary_parameter(index: faiss.IndexBinary, name: str, value: int, factory: str | None) -> None:
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


def _check_rescore(rescore: int) -> int:
    if int(rescore) != rescore or rescore < 0:
        raise EmbedkitError(f"rescore must be a whole number >= 0 (0 = off), got {rescore}", field="rescore")
    return int(rescore)


class Index:
    """A FAISS index with string document ids and the settings it was built and is searched with.

    A binary index (factory 'B...') holds 1 bit per dimension and is searched by Hamming distance; its scores are
    ``dim - 2 * hamming``, the inner product of the ±1 sign vectors, so larger is better as for 'ip'.
    """

    def __init__(self, index: faiss.Index | faiss.IndexBinary, ids: list[str], meta: dict[str, Any]) -> None:
        if index.ntotal != len(ids):
            raise EmbedkitError(f"the index holds {index.ntotal} vectors but {len(ids)} document ids were given")
        self.faiss_index = index
        self.ids = ids
        self.meta = meta
        self.search_params: dict[str, int] = dict(meta.get("search_params") or {})
        self._vectors: Any = None

    @property
    def dim(self) -> int:
        return int(self.faiss_index.d)

    @property
    def binary(self) -> bool:
        return isinstance(self.faiss_index, faiss.IndexBinary)

    def attach_vectors(self, vectors: Any) -> None:
        """The float vectors (row ``i`` = document ``i``) that ``rescore`` and tuning score exactly with.

        An array, an ``EmbeddingsFolder`` or an embeddings folder path; a folder is read memory-mapped and its
        path is recorded in meta.json (``vectors``), so a loaded index finds it again.
        """
        from embedkit.index.rescore import FloatVectors

        opened = FloatVectors.open(vectors)
        if len(opened) != len(self) or opened.dim != self.dim:
            raise EmbedkitError(
                f"the float vectors are {len(opened)} x {opened.dim}, the index {len(self)} x {self.dim}",
                path=opened.path,
            )
        if opened.folder is not None and opened.folder.ids() != self.ids:
            raise EmbedkitError("the embeddings folder lists other document ids than the index", path=opened.path)
        if opened.path is not None:
            self.meta["vectors"] = {"path": str(opened.path.resolve()), "count": len(opened)}
        self._vectors = opened

    @property
    def vectors(self) -> Any:
        """The attached float vectors (a ``FloatVectors``), opening meta.json's embeddings folder on first use."""
        if self._vectors is None:
            recorded = (self.meta.get("vectors") or {}).get("path")
            if not recorded:
                raise EmbedkitError(
                    "exact scoring needs the float vectors: build the index from an embeddings folder or attach them"
                    " (Index.attach_vectors, --embeddings)"
                )
            self.attach_vectors(recorded)
        return self._vectors

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
        binary = is_binary_factory(factory)
        data = binarize(embeddings) if binary else embeddings
        try:
            if binary:
                index = faiss.index_binary_factory(embeddings.shape[1], factory)
            else:
                index = faiss.index_factory(embeddings.shape[1], factory, METRICS[metric])
        except RuntimeError as err:
            raise EmbedkitError(
                f"FAISS cannot build factory string '{factory}': {_faiss_reason(err)}", field="factory"
            ) from None
        if use_gpu and not binary:
            index = _to_gpu(index)
        trained_on = 0
        if not index.is_trained:
            sample = data
            if len(data) > train_size:
                rows = np.random.default_rng(seed).choice(len(data), train_size, replace=False)
                sample = data[np.sort(rows)]
            try:
                index.train(sample)
            except RuntimeError as err:
                raise EmbedkitError(
                    f"training '{factory}' on {len(sample)} vectors failed: {_faiss_reason(err)}"
                ) from None
            trained_on = len(sample)
        for start in range(0, len(data), add_batch_size):
            index.add(data[start : start + add_batch_size])
        meta = {
            "format": FORMAT,
            "factory": factory,
            "metric": metric,
            "binary": binary,
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

    def _apply(self, params: dict[str, int]) -> None:
        """Set FAISS search parameters (``nprobe``, ``efSearch``) on the index, through OPQ or other pre-transforms."""
        for name, value in params.items():
            if int(value) != value or value < 1:
                raise EmbedkitError(f"must be a whole number >= 1, got {value}", field=name)
            if self.binary:
                _set_binary_parameter(self.faiss_index, name, int(value), self.meta.get("factory"))
                continue
            space = faiss.GpuParameterSpace() if _gpu_count() and hasattr(faiss, "GpuParameterSpace") else None
            space = space or faiss.ParameterSpace()
            try:
                space.set_index_parameter(self.faiss_index, name, int(value))
            except RuntimeError:
                raise EmbedkitError(
                    f"index '{self.meta.get('factory')}' has no search parameter '{name}'", field=name
                ) from None

    def set_search_params(
        self, nprobe: int | None = None, ef_search: int | None = None, rescore: int | None = None
    ) -> None:
        """Set the index's own IVF ``nprobe`` / HNSW ``efSearch`` and default ``rescore`` factor (0 = off); they are
        kept in ``meta.json``. (``search`` takes per-call values that do not stick.)"""
        params = {
            name: int(value) for name, value in (("nprobe", nprobe), ("efSearch", ef_search)) if value is not None
        }
        self._apply(params)
        self.search_params.update(params)
        if rescore is not None:
            self.search_params["rescore"] = _check_rescore(rescore)
        self.meta["search_params"] = dict(self.search_params)

    @contextlib.contextmanager
    def _temporary(self, params: dict[str, int | None]) -> Iterator[None]:
        """Search with ``params`` for the block only; the index's own settings (or FAISS's defaults) come back."""
        given = {name: value for name, value in params.items() if value is not None}
        before = {name: current_search_param(self.faiss_index, name) for name in given}
        self._apply(given)
        try:
            yield
        finally:
            self._apply(before)

    def search(
        self,
        queries: np.ndarray,
        k: int = 10,
        *,
        nprobe: int | None = None,
        ef_search: int | None = None,
        rescore: int | None = None,
        batch_size: int = 4096,
    ) -> tuple[np.ndarray, list[list[str]]]:
        """Top-``k`` scores and document ids per query row (fewer than ``k`` where the index has fewer hits).

        ``rescore=M`` takes the top ``k*M`` candidates from the (compressed) index and re-ranks them by their exact
        float scores, read from the attached vectors (see ``attach_vectors``); ``None`` uses the index's setting.
        """
        scores, labels = self.search_rows(
            queries, k, nprobe=nprobe, ef_search=ef_search, rescore=rescore, batch_size=batch_size
        )
        hits = [[self.ids[j] for j in row if j >= 0] for row in labels]
        return scores, hits

    def search_rows(
        self,
        queries: np.ndarray,
        k: int = 10,
        *,
        nprobe: int | None = None,
        ef_search: int | None = None,
        rescore: int | None = None,
        batch_size: int = 4096,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``search`` with row numbers (-1 where there is no hit) instead of document ids."""
        queries = _as_matrix(queries, "queries")
        if queries.shape[1] != self.dim:
            raise EmbedkitError(
                f"query dimension {queries.shape[1]} does not match the index dimension {self.dim}", field="dim"
            )
        if int(k) != k or k < 1:
            raise EmbedkitError(f"k must be a whole number >= 1, got {k}", field="k")
        factor = _check_rescore(self.search_params.get("rescore", 0) if rescore is None else rescore)
        k = min(k, len(self))
        depth = min(k * factor, len(self)) if factor else k
        scores = np.empty((len(queries), k), dtype=np.float32)
        labels = np.empty((len(queries), k), dtype=np.int64)
        with self._temporary({"nprobe": nprobe, "efSearch": ef_search}):
            self._search_into(queries, k, depth, factor, batch_size, scores, labels)
        return scores, labels

    def _search_into(
        self,
        queries: np.ndarray,
        k: int,
        depth: int,
        factor: int,
        batch_size: int,
        scores: np.ndarray,
        labels: np.ndarray,
    ) -> None:
        for start in range(0, len(queries), batch_size):
            stop = start + batch_size
            batch = queries[start:stop]
            if self.binary:
                hamming, rows = self.faiss_index.search(binarize(batch), depth)
                found = (self.dim - 2 * hamming).astype(np.float32)
            else:
                found, rows = self.faiss_index.search(batch, depth)
            if factor:
                from embedkit.index.rescore import rescore as exact_rescore

                found, rows = exact_rescore(batch, rows, self.vectors, k, self.metric)
            scores[start:stop], labels[start:stop] = found, rows

    @property
    def metric(self) -> str:
        """'ip' or 'l2': how exact float scores compare (meta.json's, else the FAISS index's own)."""
        if self.meta.get("metric") in METRICS:
            return self.meta["metric"]
        return "l2" if not self.binary and self.faiss_index.metric_type == faiss.METRIC_L2 else "ip"

    def check_model(self, settings: dict[str, Any]) -> None:
        """Refuse to search with a model other than the one that built the index."""
        if self.meta.get("model"):
            check_model_settings(self.meta["model"], settings)

    def save(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write ``index``, ``docid`` and ``meta.json`` as a new folder that takes ``path``'s place in one step.

        An existing index folder is replaced only with ``overwrite``; a folder embedkit did not write, never.
        """
        path = Path(path)
        with replace_folder(path, INDEX_KINDS, overwrite) as tmp:
            self.write_files(tmp, path)
        return path

    def write_files(self, folder: Path, final: Path) -> None:
        """The index's files in ``folder`` (which will be renamed to ``final``), their sha256 in meta.json."""
        if self.binary:
            faiss.write_index_binary(self.faiss_index, str(folder / "index"))
        else:
            from embedkit.index.ondisk import write_index_file  # lazy: it imports this module

            write_index_file(_to_cpu(self.faiss_index), folder, final)  # with index.ivfdata for an on-disk index
        write_lines(folder / "docid", self.ids)
        # The .ivfdata of an on-disk index is not hashed: it is mapped, not read, and may be larger than memory.
        files = {name: sha256_file(folder / name) for name in ("index", "docid")}
        write_json(folder / "meta.json", {**self.meta, "files": files})

    @classmethod
    def load(
        cls,
        path: str | Path,
        use_gpu: bool = True,
        model_settings: dict[str, Any] | None = None,
        vectors: Any = None,
        shard_gpus: bool = False,
    ) -> Index:
        """Open an embedkit or pyserini index folder; check ids, vectors and (optionally) the model agree.

        ``vectors`` (an embeddings folder or array) replaces meta.json's record of the float vectors for rescoring.
        ``shard_gpus`` spreads the vectors over all GPUs (``IndexShards``) instead of copying all to each.
        A sharded index folder is opened by ``embedkit.index.load_index``.
        """
        path = Path(path)
        if not path.is_dir():
            raise EmbedkitError("no such index folder", path=path)
        if not (path / "index").exists() and (path / "meta.json").is_file():
            from embedkit.index.sharded import refuse_sharded  # lazy: it imports this module

            refuse_sharded(path)
        for name in ("index", "docid"):
            if not (path / name).is_file():
                raise EmbedkitError(f"the index folder has no '{name}' file", path=path)
        meta: dict[str, Any] = read_json(path / "meta.json") if (path / "meta.json").is_file() else {}
        if not isinstance(meta, dict):
            raise EmbedkitError("expected a JSON object", path=path / "meta.json")
        for name, digest in (meta.get("files") or {}).items():
            if sha256_file(path / name) != digest:
                raise EmbedkitError(
                    "changed since it was written (its sha256 differs from meta.json); rebuild the index",
                    path=path / name,
                )
        binary = bool(meta.get("binary"))
        try:
            if binary:
                index = faiss.read_index_binary(str(path / "index"))
            else:  # an on-disk index's lists are mapped from the index.ivfdata beside 'index', whatever the cwd
                from embedkit.index.ondisk import read_index_file  # lazy: it imports this module

                index = read_index_file(path / "index", on_disk=bool(meta.get("on_disk")))
        except RuntimeError as err:
            raise EmbedkitError(f"not a readable FAISS index ({_faiss_reason(err)})", path=path / "index") from None
        ids = read_lines(path / "docid")
        if index.ntotal != len(ids):
            raise EmbedkitError(f"'index' holds {index.ntotal} vectors but 'docid' lists {len(ids)} ids", path=path)
        if meta.get("dim") not in (None, index.d):
            raise EmbedkitError(f"meta.json says dim {meta['dim']}, the index has {index.d}", path=path, field="dim")
        meta.setdefault("format", FORMAT)
        meta.setdefault("dim", int(index.d))
        meta.setdefault("count", len(ids))
        on_disk = bool(meta.get("on_disk"))  # searched where it lies: a GPU copy would need all its lists in memory
        loaded = cls(_to_gpu(index, shard=shard_gpus) if use_gpu and not (binary or on_disk) else index, ids, meta)
        if loaded.search_params:
            loaded.set_search_params(loaded.search_params.get("nprobe"), loaded.search_params.get("efSearch"))
        if model_settings is not None:
            loaded.check_model(model_settings)
        if vectors is not None:
            loaded.attach_vectors(vectors)
        return loaded
