"""``Index``: a FAISS index plus its document ids, built from any ``index_factory`` string.

On disk it is pyserini's layout (a FAISS file ``index`` and a ``docid`` file, one id per line) plus ``meta.json``,
so pyserini's ``FaissSearcher`` opens embedkit indexes and embedkit opens pyserini's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import faiss
import numpy as np

from embedkit.errors import EmbedkitError
from embedkit.index.building import Trained, build_faiss
from embedkit.index.engine import refuse_filter
from embedkit.index.faiss_helpers import (
    INDEX_KINDS,
    METRICS,
    BuildSettings,
    as_matrix,
    binarize,
    check_model_settings,
    check_rescore,
    check_whole,
    faiss_reason,
    gpu_count,
    to_gpu,
)
from embedkit.index.index_files import read_index_folder, write_index_file
from embedkit.index.rescore import rescore as exact_rescore
from embedkit.index.search_params import SearchParams
from embedkit.index.torch_search import ExactSearch, TorchExactSearch, flat_storage, wants_torch
from embedkit.index.vectors import Vectors
from embedkit.outputs import replace_folder
from embedkit.protocols import Capabilities, Hits
from embedkit.storage import sha256_file, write_json, write_lines
from embedkit.validation import check_ids


class Index(SearchParams):
    """A FAISS index with string document ids and the settings it was built and is searched with.

    A binary index (factory 'B...') holds 1 bit per dimension and is searched by Hamming distance; its scores are
    ``dim - 2 * hamming``, the inner product of the ±1 sign vectors, so larger is better as for 'ip'.
    """

    engine = "faiss"
    family = "dense"
    search_parameters = ("nprobe", "ef_search", "rescore")  # what search() takes beyond rows, k and filter

    def __init__(self, index: faiss.Index | faiss.IndexBinary, ids: list[str], meta: dict[str, Any]) -> None:
        if index.ntotal != len(ids):
            raise EmbedkitError(f"the index holds {index.ntotal} vectors but {len(ids)} document ids were given")
        self.faiss_index = index
        self.ids = ids
        self.meta = meta
        self.search_params: dict[str, int] = dict(meta.get("search_params") or {})
        self._vectors: Vectors | None = None
        self.folder: Path | None = None  # where it was loaded from, named in messages
        self.exact = ExactSearch.from_meta(meta.get("exact_search"))
        self._torch: TorchExactSearch | bool | None = None  # False: FAISS searches (decided on the first search)

    @property
    def dim(self) -> int:
        return int(self.faiss_index.d)

    @property
    def binary(self) -> bool:
        return isinstance(self.faiss_index, faiss.IndexBinary)

    def __len__(self) -> int:
        return int(self.faiss_index.ntotal)

    @property
    def capabilities(self) -> Capabilities:
        """Exact for a float ``Flat`` index (binary codes approximate the float scores)."""
        inner = self.faiss_index if self.binary else faiss.downcast_index(self.faiss_index)
        return Capabilities(approximate=not isinstance(inner, faiss.IndexFlat), on_disk=bool(self.meta.get("on_disk")),
                            gpu="Gpu" in type(inner).__name__)  # fmt: skip

    @property
    def model_settings(self) -> dict[str, Any]:
        """The settings of the model whose vectors the index holds (meta.json's ``model``)."""
        return self.meta.get("model") or {}

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
        ids = check_ids(ids, "ids")  # a docid file holds one id a line: no whitespace, no repeats, strings only
        embeddings = as_matrix(embeddings, "embeddings")
        if len(embeddings) != len(ids):
            raise EmbedkitError(f"{len(embeddings)} vectors but {len(ids)} document ids", field="ids")
        if not len(ids):
            raise EmbedkitError("an index needs at least one vector", field="embeddings")
        settings = BuildSettings(factory, metric, train_size, add_batch_size, use_gpu, seed, nprobe, ef_search).check()
        return cls.from_vectors(Vectors.of(embeddings, ids, model_settings), settings)

    @classmethod
    def from_vectors(
        cls,
        vectors: Any,
        settings: BuildSettings,
        start: int = 0,
        stop: int | None = None,
        trained: Trained | None = None,
    ) -> Index:
        """Rows ``start:stop`` of ``vectors`` (``Vectors``, an embeddings folder or its path), streamed from their
        memory-mapped shard files; ``trained`` reuses a quantizer trained before."""
        index, ids, meta = build_faiss(Vectors.open(vectors), settings, start, stop, trained)
        built = cls(index, ids, meta)
        built.set_search_params(nprobe=settings.nprobe, ef_search=settings.ef_search)
        return built

    # --- float vectors, for exact rescoring and tuning ---------------------------------------------------------

    def attach_vectors(self, vectors: Any) -> None:
        """The float vectors (row ``i`` = document ``i``) that ``rescore`` and tuning score exactly with.

        An array, an ``EmbeddingsFolder`` or an embeddings folder path; a folder is read memory-mapped and its
        path is recorded in meta.json (``vectors``), so a loaded index finds it again.
        """
        opened = Vectors.open(vectors)
        if len(opened) != len(self) or opened.dim != self.dim:
            raise EmbedkitError(
                f"the float vectors are {len(opened)} x {opened.dim}, the index {len(self)} x {self.dim}",
                path=opened.path,
            )
        if opened.part_ids is not None and opened.ids() != self.ids:
            raise EmbedkitError("the embeddings folder lists other document ids than the index", path=opened.path)
        recorded = self.meta.get("vectors") or {}
        opened.check_same(recorded, self.folder)  # what the index was built from, not what is there now
        now = opened.record().get("vectors", {})
        if now and "rows" not in self.meta:
            self.meta["vectors"] = {**recorded, **{key: value for key, value in now.items() if value}}
        self._vectors = opened

    @property
    def vectors(self) -> Vectors:
        """The attached float vectors, opening meta.json's embeddings folder on first use."""
        if self._vectors is None:
            recorded = (self.meta.get("vectors") or {}).get("path")
            if not recorded:
                raise EmbedkitError(
                    "exact scoring needs the float vectors: build the index from an embeddings folder or attach them"
                    " (Index.attach_vectors, --embeddings)"
                )
            self.attach_vectors(recorded)
        return self._vectors

    # --- search ------------------------------------------------------------------------------------------------

    def search(
        self,
        queries: np.ndarray,
        k: int = 10,
        *,
        nprobe: int | None = None,
        ef_search: int | None = None,
        rescore: int | None = None,
        batch_size: int = 4096,
        filter: str | None = None,
    ) -> Hits:
        """Top-``k`` scores and document ids per query row (fewer than ``k`` where the index has fewer hits).

        ``rescore=M`` takes the top ``k*M`` candidates from the (compressed) index and re-ranks them by their exact
        float scores, read from the attached vectors (see ``attach_vectors``); ``None`` uses the index's setting.
        """
        refuse_filter(filter, "FAISS")
        scores, labels = self.search_rows(
            queries, k, nprobe=nprobe, ef_search=ef_search, rescore=rescore, batch_size=batch_size
        )
        hits = [[self.ids[j] for j in row if j >= 0] for row in labels]
        return Hits(scores, hits)

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
        queries = as_matrix(queries, "queries")
        if queries.shape[1] != self.dim:
            raise EmbedkitError(
                f"query dimension {queries.shape[1]} does not match the index dimension {self.dim}", field="dim"
            )
        k = min(check_whole(k, "k", 1, maximum=None), len(self))  # k above the corpus size: every document
        factor = check_rescore(self.search_params.get("rescore", 0) if rescore is None else rescore)
        depth = min(k * factor, len(self)) if factor else k
        scores = np.empty((len(queries), k), dtype=np.float32)
        labels = np.empty((len(queries), k), dtype=np.int64)
        with self._temporary({"nprobe": nprobe, "efSearch": ef_search}):
            for start in range(0, len(queries), batch_size):
                batch = queries[start : start + batch_size]
                try:
                    found, rows = self._search_batch(batch, depth)
                except RuntimeError as err:  # e.g. a GPU index asked for more than it can select
                    raise EmbedkitError(f"FAISS could not search with k={depth}: {faiss_reason(err)}") from None
                if factor:
                    found, rows = exact_rescore(batch, rows, self.vectors, k, self.metric)
                scores[start : start + batch_size], labels[start : start + batch_size] = found, rows
        return scores, labels

    def set_exact_search(self, settings: ExactSearch) -> None:
        """How a ``Flat`` index is searched: FAISS, or torch on a device in a dtype (``torch_search``); in meta.json."""
        self.exact, self._torch = settings.check(), None
        self.meta["exact_search"] = settings.to_meta()

    def _torch_search(self) -> TorchExactSearch | None:
        """The torch search of a ``Flat`` index where it is chosen, made on first use; what it used goes in meta."""
        if self._torch is None:
            self._torch = False
            if not self.binary and wants_torch(self.exact, gpu_count()):
                storage = flat_storage(self.faiss_index)
                if storage is None and self.exact.backend == "torch":
                    raise EmbedkitError(f"only a CPU 'Flat' index, not '{self.meta.get('factory')}'", field="backend")
                if storage is not None:
                    self._torch = TorchExactSearch(storage, self.metric, self.exact)
                    self.meta["exact_search"] = {**self.exact.to_meta(), "used": self._torch.record()}
        return self._torch or None

    def _search_batch(self, batch: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        if self._torch_search() is not None:
            return self._torch_search().search(batch, depth)
        if self.binary:
            hamming, rows = self.faiss_index.search(binarize(batch), depth)
            return (self.dim - 2 * hamming).astype(np.float32), rows
        return self.faiss_index.search(batch, depth)

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

    # --- on disk -----------------------------------------------------------------------------------------------

    def save(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write ``index``, ``docid`` and ``meta.json`` as a new folder that takes ``path``'s place in one step.

        An existing index folder is replaced only with ``overwrite``; a folder embedkit did not write, never.
        """
        path = Path(path)
        with replace_folder(path, INDEX_KINDS, overwrite) as tmp:
            self.write_files(tmp, path)
        return path

    def write_files(self, folder: Path, final: Path) -> None:
        """The index's files in ``folder`` (which will be renamed to ``final``), their sha256 in meta.json.

        The ``index.ivfdata`` of an on-disk index is not hashed: it is mapped, not read, and may exceed memory.
        """
        write_index_file(self.faiss_index, folder, final)
        write_lines(folder / "docid", self.ids)
        files = {name: sha256_file(folder / name) for name in ("index", "docid")}
        write_json(folder / "meta.json", {**self.meta, "files": files})

    @classmethod
    def open(cls, path: str | Path, **options: Any) -> Index:
        """``load``, as the registry opens every engine."""
        return cls.load(path, **options)

    @classmethod
    def load(
        cls,
        path: str | Path,
        use_gpu: bool = True,
        model_settings: dict[str, Any] | None = None,
        vectors: Any = None,
        split_across_gpus: bool = False,
    ) -> Index:
        """Open an embedkit or pyserini index folder; check checksums, ids, vectors and (optionally) the model.

        ``vectors`` (an embeddings folder or array) replaces meta.json's record of the float vectors for rescoring.
        ``split_across_gpus`` spreads the vectors over all GPUs instead of copying all of them to each. A partitioned
        index folder is opened by ``embedkit.index.load_index``.
        """
        index, ids, meta = read_index_folder(Path(path))
        binary, on_disk = bool(meta.get("binary")), bool(meta.get("on_disk"))
        # an on-disk index is searched where it lies: a GPU copy would need all its lists in memory
        on_device = use_gpu and not (binary or on_disk)
        loaded = cls(to_gpu(index, split=split_across_gpus) if on_device else index, ids, meta)
        loaded.folder = Path(path)
        if loaded.search_params:
            loaded.set_search_params(loaded.search_params.get("nprobe"), loaded.search_params.get("efSearch"))
        if model_settings is not None:
            loaded.check_model(model_settings)
        if vectors is not None:
            loaded.attach_vectors(vectors)
        return loaded
