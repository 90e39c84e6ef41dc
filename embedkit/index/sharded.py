"""Several index folders searched as one: each shard answers its top-k, the merge keeps the best k by score.

On disk a sharded index is a folder whose ``meta.json`` says ``"format": "embedkit.sharded-index/1"`` and lists its
shard subfolders, each an ordinary index folder (pyserini layout), so one shard can be rebuilt, moved to another
machine or opened alone. Shards built by ``build_sharded`` share one trained quantizer, so an IVF searched shard by
shard visits the same lists as the one index holding everything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from embedkit.encode.folder import EmbeddingsFolder
from embedkit.environment import library_versions
from embedkit.errors import EmbedkitError
from embedkit.index.building import FolderVectors, build_from_folder, train_index
from embedkit.index.faiss_index import INDEX_KINDS, Index
from embedkit.storage import read_json, replace_folder, write_json

SHARDED_FORMAT = "embedkit.sharded-index/1"


def _read_meta(path: Path) -> dict[str, Any]:
    meta = read_json(path / "meta.json")
    if not isinstance(meta, dict):
        raise EmbedkitError("expected a JSON object", path=path / "meta.json")
    return meta


def is_sharded(path: str | Path) -> bool:
    """Whether ``path`` is a sharded index folder (by its meta.json)."""
    path = Path(path)
    return (path / "meta.json").is_file() and _read_meta(path).get("format") == SHARDED_FORMAT


def refuse_sharded(path: Path) -> None:
    """Tell ``Index.load`` callers that a sharded folder opens with ``load_index``."""
    if is_sharded(path):
        raise EmbedkitError("a sharded index folder: open it with embedkit.index.load_index", path=path)


class ShardedIndex:
    """Index shards searched together; the same search interface as ``Index``."""

    def __init__(self, shards: list[Index], meta: dict[str, Any], names: list[str] | None = None) -> None:
        if not shards:
            raise EmbedkitError("a sharded index needs at least one shard")
        dims = {shard.dim for shard in shards}
        metrics = {shard.metric for shard in shards}
        if len(dims) != 1 or len(metrics) != 1:
            raise EmbedkitError(f"the shards disagree in dimension {sorted(dims)} or metric {sorted(metrics)}")
        self.shards = shards
        self.names = names or [f"shard-{number:05d}" for number in range(len(shards))]
        self.meta = meta
        self.metric = metrics.pop()

    @property
    def dim(self) -> int:
        return self.shards[0].dim

    def __len__(self) -> int:
        return sum(len(shard) for shard in self.shards)

    @property
    def ids(self) -> list[str]:
        """All document ids, shard after shard (built on each call: the shards hold the lists)."""
        return [doc for shard in self.shards for doc in shard.ids]

    @property
    def search_params(self) -> dict[str, int]:
        return dict(self.meta.get("search_params") or {})

    def attach_vectors(self, vectors: Any) -> None:
        """The float vectors of all shards in order (array, ``EmbeddingsFolder`` or its path), for ``rescore``:
        each shard gets its own rows, read memory-mapped."""
        from embedkit.index.rescore import FloatVectors

        whole = FloatVectors.open(vectors)
        if len(whole) != len(self) or whole.dim != self.dim:
            raise EmbedkitError(
                f"the float vectors are {len(whole)} x {whole.dim}, the index {len(self)} x {self.dim}", path=whole.path
            )
        if whole.folder is not None and whole.folder.ids() != self.ids:
            raise EmbedkitError("the embeddings folder lists other document ids than the index", path=whole.path)
        start = 0
        for shard in self.shards:
            stop = start + len(shard)
            views = [
                part[max(start, lo) - lo : min(stop, hi) - lo]
                for part, lo, hi in zip(whole.shards, whole.offsets[:-1], whole.offsets[1:])
                if max(start, lo) < min(stop, hi)
            ]
            shard.attach_vectors(FloatVectors(views))
            start = stop

    def set_search_params(self, nprobe: int | None = None, ef_search: int | None = None, **more: Any) -> None:
        """Set the parameters on every shard; kept in ``meta.json``."""
        for shard in self.shards:
            shard.set_search_params(nprobe=nprobe, ef_search=ef_search, **more)
        self.meta["search_params"] = dict(self.shards[0].search_params)

    def search(
        self, queries: np.ndarray, k: int = 10, *, nprobe: int | None = None, ef_search: int | None = None, **more: Any
    ) -> tuple[np.ndarray, list[list[str]]]:
        """Top-``k`` over all shards: ``Index.search`` on each, merged by score ('ip': larger, 'l2': smaller first).

        Ties keep shard order, then each shard's own order, so a hit found earlier in the corpus ranks first.
        """
        answers = [shard.search(queries, k, nprobe=nprobe, ef_search=ef_search, **more) for shard in self.shards]
        self.meta["search_params"] = dict(self.shards[0].search_params)
        scores = np.concatenate([found for found, _ in answers], axis=1)
        larger_is_better = self.metric != "l2"
        key = np.where(_found_mask(answers), -scores if larger_is_better else scores, np.inf)
        order = np.argsort(key, axis=1, kind="stable")[:, : min(k, len(self))]
        merged_scores = np.take_along_axis(scores, order, axis=1)
        hits = []
        for row, picks in enumerate(order):
            candidates = [doc for (found, hit) in answers for doc in _padded(hit[row], found.shape[1])]
            hits.append([candidates[j] for j in picks if candidates[j] is not None])
        return merged_scores, hits

    def check_model(self, settings: dict[str, Any]) -> None:
        """Refuse to search with a model other than the one that built the shards."""
        for shard in self.shards:
            shard.check_model(settings)

    def save(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write every shard folder and meta.json as a new folder that takes ``path``'s place in one step (an existing
        index folder only with ``overwrite``)."""
        path = Path(path)
        with replace_folder(path, INDEX_KINDS, overwrite) as tmp:
            for name, shard in zip(self.names, self.shards):
                shard.save(tmp / name)
            write_json(tmp / "meta.json", {**self.meta, "shards": self.names, "count": len(self)})
        return path

    @classmethod
    def load(cls, path: str | Path, use_gpu: bool = True, model_settings: dict[str, Any] | None = None) -> ShardedIndex:
        """Open a sharded index folder and every shard it lists."""
        path = Path(path)
        meta = _read_meta(path) if (path / "meta.json").is_file() else {}
        if meta.get("format") != SHARDED_FORMAT:
            raise EmbedkitError(f"not a sharded index (format {meta.get('format')!r})", path=path / "meta.json")
        names = meta.get("shards")
        if not isinstance(names, list) or not names:
            raise EmbedkitError("lists no shards", path=path / "meta.json", field="shards")
        for name in names:
            if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
                raise EmbedkitError(f"shard {name!r} is not a subfolder name", path=path / "meta.json", field="shards")
        shards = [Index.load(path / name, use_gpu=use_gpu) for name in names]
        loaded = cls(shards, meta, names)
        if sum(len(shard) for shard in shards) != meta.get("count", len(loaded)):
            raise EmbedkitError(f"meta.json says {meta['count']} vectors, the shards hold {len(loaded)}", path=path)
        if model_settings is not None:
            loaded.check_model(model_settings)
        return loaded


def _found_mask(answers: list[tuple[np.ndarray, list[list[str]]]]) -> np.ndarray:
    """True where a shard returned a hit (``Index.search`` drops the -1 padding from its id lists)."""
    masks = []
    for found, hits in answers:
        lengths = np.array([len(row) for row in hits])[:, None]
        masks.append(np.arange(found.shape[1])[None, :] < lengths)
    return np.concatenate(masks, axis=1)


def _padded(row: list[str], width: int) -> list[str | None]:
    return [*row, *([None] * (width - len(row)))]


def load_index(
    path: str | Path, use_gpu: bool = True, model_settings: dict[str, Any] | None = None
) -> Index | ShardedIndex:
    """Open any index folder: a sharded one as ``ShardedIndex``, else as ``Index`` (embedkit or pyserini)."""
    if is_sharded(path):
        return ShardedIndex.load(path, use_gpu=use_gpu, model_settings=model_settings)
    return Index.load(path, use_gpu=use_gpu, model_settings=model_settings)


def shard_ranges(count: int, num_shards: int) -> list[tuple[int, int]]:
    """``num_shards`` contiguous row ranges covering ``0:count`` whose sizes differ by at most 1."""
    return [(i * count // num_shards, (i + 1) * count // num_shards) for i in range(num_shards)]


def build_sharded(
    folder: EmbeddingsFolder | FolderVectors,
    output: str | Path,
    num_shards: int,
    factory: str = "Flat",
    metric: str = "ip",
    *,
    on_disk: bool = False,
    train_size: int = 1_000_000,
    add_batch_size: int = 100_000,
    use_gpu: bool = True,
    seed: int = 0,
    nprobe: int | None = None,
    ef_search: int | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``num_shards`` index shards of contiguous row ranges to ``output`` (atomically), one shard in memory
    at a time; a trained type is trained once on a sample across all rows and the quantizer shared by the shards."""
    vectors = folder if isinstance(folder, FolderVectors) else FolderVectors.open(folder)
    if not 1 <= num_shards <= len(vectors):
        raise EmbedkitError(
            f"--num-shards must be between 1 and the {len(vectors)} vectors, not {num_shards}", field="num_shards"
        )
    if on_disk:
        from embedkit.index.ondisk import build_ondisk, check_ondisk_factory

        check_ondisk_factory(factory, vectors.dim, metric)
    trained = train_index(vectors, factory, metric, train_size=train_size, seed=seed, use_gpu=use_gpu)
    output = Path(output)
    names, counts, params = [], [], {}
    with replace_folder(output, INDEX_KINDS, overwrite) as tmp:
        for number, (start, stop) in enumerate(shard_ranges(len(vectors), num_shards)):
            names.append(f"shard-{number:05d}")
            common = {"train_size": train_size, "add_batch_size": add_batch_size, "use_gpu": use_gpu, "seed": seed}
            common.update(nprobe=nprobe, ef_search=ef_search, start=start, stop=stop, trained=trained)
            if on_disk:
                shard = build_ondisk(vectors, tmp / names[-1], factory, metric, **common)
            else:
                shard = build_from_folder(vectors, factory, metric, **common)
                shard.save(tmp / names[-1])
            counts.append(len(shard))
            params = shard.search_params
            del shard
        meta = {
            "format": SHARDED_FORMAT,
            "shards": names,
            "counts": counts,
            "factory": factory,
            "metric": metric,
            "dim": vectors.dim,
            "count": len(vectors),
            "trained_on": trained[1],
            "seed": seed,
            "on_disk": on_disk,
            "model": vectors.settings,
            "search_params": params,
            "library_versions": library_versions(),
        }
        write_json(tmp / "meta.json", meta)
    return output
