"""Several index folders searched as one: each partition answers its top-k, the merge keeps the best k by score.

On disk a partitioned index is a folder whose ``meta.json`` says ``"format": "embedkit.partitioned-index/1"`` and
lists its partition subfolders, each an ordinary index folder (pyserini layout), so one partition can be rebuilt,
moved to another machine or opened alone. Partitions built by ``build_partitioned`` share one trained quantizer,
so an IVF searched partition by partition visits the same lists as the one index holding everything. (Folders
written before 0.2 say ``embedkit.sharded-index/1`` and list ``shards``; they open the same way.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from embedkit.environment import library_versions
from embedkit.errors import EmbedkitError
from embedkit.index.building import train_index
from embedkit.index.faiss_helpers import (
    INDEX_KINDS,
    PARTITIONED_FORMAT,
    PARTITIONED_FORMATS,
    BuildSettings,
)
from embedkit.index.faiss_index import Index
from embedkit.index.index_files import is_partitioned, read_meta
from embedkit.index.ondisk import build_ondisk, check_ondisk_factory
from embedkit.index.store import STORE
from embedkit.index.vectors import Vectors
from embedkit.outputs import replace_folder
from embedkit.protocols import Capabilities, Hits
from embedkit.storage import write_json


class PartitionedIndex:
    """Index partitions searched together; the same search interface as ``Index``."""

    engine = "faiss"
    family = "dense"
    search_parameters = ("nprobe", "ef_search", "rescore")

    def __init__(self, partitions: list[Index], meta: dict[str, Any], names: list[str] | None = None) -> None:
        if not partitions:
            raise EmbedkitError("a partitioned index needs at least one partition")
        dims = {part.dim for part in partitions}
        metrics = {part.metric for part in partitions}
        if len(dims) != 1 or len(metrics) != 1:
            raise EmbedkitError(f"the partitions disagree in dimension {sorted(dims)} or metric {sorted(metrics)}")
        self.partitions = partitions
        self.names = names or [f"partition-{number:05d}" for number in range(len(partitions))]
        self.meta = meta
        self.metric = metrics.pop()

    @property
    def dim(self) -> int:
        return self.partitions[0].dim

    def __len__(self) -> int:
        return sum(len(part) for part in self.partitions)

    @property
    def capabilities(self) -> Capabilities:
        return self.partitions[0].capabilities

    @property
    def model_settings(self) -> dict[str, Any]:
        return self.partitions[0].model_settings

    @classmethod
    def open(cls, path: str | Path, **options: Any) -> PartitionedIndex:
        return cls.load(path, **options)

    @property
    def ids(self) -> list[str]:
        """All document ids, partition after partition (built on each call: the partitions hold the lists)."""
        return [doc for part in self.partitions for doc in part.ids]

    @property
    def search_params(self) -> dict[str, int]:
        return dict(self.meta.get("search_params") or {})

    def attach_vectors(self, vectors: Any) -> None:
        """The float vectors of all partitions in order (array, ``EmbeddingsFolder`` or its path), for ``rescore``:
        each partition gets its own rows, read memory-mapped."""
        whole = Vectors.open(vectors)
        if len(whole) != len(self) or whole.dim != self.dim:
            raise EmbedkitError(
                f"the float vectors are {len(whole)} x {whole.dim}, the index {len(self)} x {self.dim}", path=whole.path
            )
        if whole.part_ids is not None and whole.ids() != self.ids:
            raise EmbedkitError("the embeddings folder lists other document ids than the index", path=whole.path)
        start = 0
        for part in self.partitions:
            part.attach_vectors(whole.slice(start, start + len(part)))
            start += len(part)

    def set_search_params(self, nprobe: int | None = None, ef_search: int | None = None, **more: Any) -> None:
        """Set the parameters on every partition; kept in ``meta.json``."""
        for part in self.partitions:
            part.set_search_params(nprobe=nprobe, ef_search=ef_search, **more)
        self.meta["search_params"] = dict(self.partitions[0].search_params)

    def search(
        self, queries: np.ndarray, k: int = 10, *, nprobe: int | None = None, ef_search: int | None = None, **more: Any
    ) -> Hits:
        """Top-``k`` over all partitions: ``Index.search`` on each, merged by score ('ip': larger, 'l2': smaller
        first). Ties keep partition order, then each partition's own order, so a hit found earlier ranks first."""
        answers = [part.search(queries, k, nprobe=nprobe, ef_search=ef_search, **more) for part in self.partitions]
        scores = np.concatenate([found for found, _ in answers], axis=1)
        larger_is_better = self.metric != "l2"
        key = np.where(_found_mask(answers), -scores if larger_is_better else scores, np.inf)
        order = np.argsort(key, axis=1, kind="stable")[:, : min(k, len(self))]
        merged_scores = np.take_along_axis(scores, order, axis=1)
        hits = []
        for row, picks in enumerate(order):
            candidates = [doc for (found, hit) in answers for doc in _padded(hit[row], found.shape[1])]
            hits.append([candidates[j] for j in picks if candidates[j] is not None])
        return Hits(merged_scores, hits)

    def check_model(self, settings: dict[str, Any]) -> None:
        """Refuse to search with a model other than the one that built the partitions."""
        for part in self.partitions:
            part.check_model(settings)

    def save(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write every partition folder and meta.json as a new folder that takes ``path``'s place in one step (an
        existing index folder only with ``overwrite``)."""
        path = Path(path)
        with replace_folder(path, INDEX_KINDS, overwrite) as tmp:
            for name, part in zip(self.names, self.partitions):
                (tmp / name).mkdir()
                part.write_files(tmp / name, path / name)
            write_json(tmp / "meta.json", {**self.meta, "partitions": self.names, "count": len(self)})
        return path

    @classmethod
    def load(
        cls, path: str | Path, use_gpu: bool = True, model_settings: dict[str, Any] | None = None
    ) -> PartitionedIndex:
        """Open a partitioned index folder and every partition it lists."""
        path = Path(path)
        meta = read_meta(path)
        if meta.get("format") not in PARTITIONED_FORMATS:
            raise EmbedkitError(f"not a partitioned index (format {meta.get('format')!r})", path=path / "meta.json")
        names = meta.get("partitions", meta.get("shards"))
        if not isinstance(names, list) or not names:
            raise EmbedkitError("lists no partitions", path=path / "meta.json", field="partitions")
        for name in names:
            if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
                message = f"partition {name!r} is not a subfolder name"
                raise EmbedkitError(message, path=path / "meta.json", field="partitions")
        partitions = [Index.load(path / name, use_gpu=use_gpu) for name in names]
        loaded = cls(partitions, meta, names)
        if len(loaded) != meta.get("count", len(loaded)):
            raise EmbedkitError(f"meta.json says {meta['count']} vectors, the partitions hold {len(loaded)}", path=path)
        if model_settings is not None:
            loaded.check_model(model_settings)
        return loaded


def _found_mask(answers: list[tuple[np.ndarray, list[list[str]]]]) -> np.ndarray:
    """True where a partition returned a hit (``Index.search`` drops the -1 padding from its id lists)."""
    masks = []
    for found, hits in answers:
        lengths = np.array([len(row) for row in hits])[:, None]
        masks.append(np.arange(found.shape[1])[None, :] < lengths)
    return np.concatenate(masks, axis=1)


def _padded(row: list[str], width: int) -> list[str | None]:
    return [*row, *([None] * (width - len(row)))]


def load_index(
    path: str | Path, use_gpu: bool = True, model_settings: dict[str, Any] | None = None
) -> Index | PartitionedIndex:
    """Open any index folder: a partitioned one as ``PartitionedIndex``, one with a store as ``LiveIndex`` (its
    changes replayed), else as ``Index`` (embedkit or pyserini)."""
    if (Path(path) / STORE).is_file():
        from embedkit.index.live import LiveIndex

        live = LiveIndex.load_live(path)
        if model_settings is not None:
            live.check_model(model_settings)
        return live
    if is_partitioned(path):
        return PartitionedIndex.load(path, use_gpu=use_gpu, model_settings=model_settings)
    return Index.load(path, use_gpu=use_gpu, model_settings=model_settings)


def partition_ranges(count: int, num_partitions: int) -> list[tuple[int, int]]:
    """``num_partitions`` contiguous row ranges covering ``0:count`` whose sizes differ by at most 1."""
    return [(i * count // num_partitions, (i + 1) * count // num_partitions) for i in range(num_partitions)]


def build_partitioned(
    vectors: Any,
    output: str | Path,
    num_partitions: int,
    settings: BuildSettings,
    *,
    on_disk: bool = False,
    overwrite: bool = False,
) -> Path:
    """Write ``num_partitions`` index partitions of contiguous row ranges to ``output`` (as one unit), one in memory
    at a time; a trained type is trained once on a sample across all rows and the quantizer shared by them."""
    vectors = Vectors.open(vectors)
    if not 1 <= num_partitions <= len(vectors):
        message = f"must be between 1 and the {len(vectors)} vectors, not {num_partitions}"
        raise EmbedkitError(message, field="num_partitions")
    if on_disk:
        check_ondisk_factory(settings.factory, vectors.dim, settings.metric)
    trained = train_index(vectors, settings)
    output = Path(output)
    names, counts, params = [], [], {}
    with replace_folder(output, INDEX_KINDS, overwrite) as tmp:
        for number, (start, stop) in enumerate(partition_ranges(len(vectors), num_partitions)):
            names.append(f"partition-{number:05d}")
            if on_disk:
                part = build_ondisk(vectors, tmp / names[-1], settings, start=start, stop=stop, trained=trained)
            else:
                part = Index.from_vectors(vectors, settings, start, stop, trained)
                (tmp / names[-1]).mkdir()
                part.write_files(tmp / names[-1], output / names[-1])
            counts.append(len(part))
            params = part.search_params
            del part
        meta = {
            "format": PARTITIONED_FORMAT,
            "partitions": names,
            "counts": counts,
            "factory": settings.factory,
            "metric": settings.metric,
            "dim": vectors.dim,
            "count": len(vectors),
            "trained_on": trained[1],
            "seed": settings.seed,
            "on_disk": on_disk,
            "model": vectors.settings,
            "search_params": params,
            "library_versions": library_versions(),
        }
        write_json(tmp / "meta.json", meta)
    return output


ShardedIndex = PartitionedIndex  # the name before 0.2, kept for one release
