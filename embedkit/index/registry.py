"""``open_index``: any index folder, whatever its family and engine, through one registry (FAISS's factory idea).

An index folder's ``meta.json`` names its ``format`` and ``engine``; the registry maps that pair to the class that
opens it (``cls.open(folder)``). Engines register by dotted path, so this module imports none of them until a folder
asks for one: the Lucene-impact and Seismic engines live in ``embedkit.integrations`` and register here by name,
and a package of its own registers through the ``embedkit.index_engines`` entry-point group
(``"<format> <engine>" = "module:Class"``). Every engine's folder lists its files with their sha256 in
``meta.json`` (``files``); ``verify_files`` checks them before the engine reads a byte, so a damaged or missing file
is one line naming it, for every engine alike.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from embedkit.errors import EmbedkitError
from embedkit.storage import read_json, sha256_file

FAISS_FORMAT = "embedkit.index/1"
PARTITIONED_FORMATS = ("embedkit.partitioned-index/1", "embedkit.sharded-index/1")
SPARSE_FORMAT = "embedkit.sparse-index/1"
MULTIVECTOR_FORMAT = "embedkit.multivector-index/1"
STORE = "store.sqlite"  # a living index's store beside the snapshot (``embedkit.index.store``)

_ENGINES: dict[tuple[str, str], str] = {
    (FAISS_FORMAT, "faiss"): "embedkit.index.faiss_index:Index",
    (PARTITIONED_FORMATS[0], "faiss"): "embedkit.index.partitioned:PartitionedIndex",
    (PARTITIONED_FORMATS[1], "faiss"): "embedkit.index.partitioned:PartitionedIndex",
    (SPARSE_FORMAT, "exact"): "embedkit.index.sparse_exact:SparseExactIndex",
    (SPARSE_FORMAT, "lucene-impact"): "embedkit.integrations.pyserini_impact:LuceneImpact",
    (SPARSE_FORMAT, "seismic"): "embedkit.integrations.seismic:SeismicSparse",
    (MULTIVECTOR_FORMAT, "exact"): "embedkit.index.multivector_exact:MultiVectorExactIndex",
    (MULTIVECTOR_FORMAT, "ivf"): "embedkit.index.multivector_ivf:MultiVectorIVFIndex",
    (MULTIVECTOR_FORMAT, "plaid"): "embedkit.index.multivector_plaid:MultiVectorPlaidIndex",
}
LIVE = {"faiss": "embedkit.index.live:LiveIndex"}  # an engine that takes updates itself; any other is held by
ROWS_LIVE = "embedkit.index.live_rows:RowsLiveIndex"  # the store, its snapshot searched beside the rows added


def register_engine(format: str, engine: str, target: str) -> None:
    """Make ``open_index`` open folders of ``format`` and ``engine`` with ``target`` (``"module:Class"``), whose
    ``open(folder)`` classmethod returns a ``SearchIndex``."""
    if ":" not in target:
        raise ValueError(f"target must be 'module:Class', not {target!r}")
    _ENGINES[(format, engine)] = target


def engines() -> dict[tuple[str, str], str]:
    """Every registered (format, engine) and the class that opens it, entry points included."""
    found = dict(_ENGINES)
    for point in entry_points(group="embedkit.index_engines"):
        format, _, engine = point.name.partition(" ")
        found.setdefault((format, engine), point.value)
    return found


def read_meta(folder: Path) -> dict[str, Any]:
    """A folder's ``meta.json`` (empty for a pyserini FAISS folder, which has none)."""
    if not (folder / "meta.json").is_file():
        return {}
    meta = read_json(folder / "meta.json", "index metadata")
    if not isinstance(meta, dict):
        raise EmbedkitError("expected a JSON object", path=folder / "meta.json")
    return meta


def engine_of(folder: str | Path) -> tuple[str, str]:
    """The (format, engine) pair a folder's ``meta.json`` names; a folder without one is pyserini's FAISS layout."""
    folder = Path(folder)
    if not folder.is_dir():
        raise EmbedkitError("no such index folder", path=folder)
    meta = read_meta(folder)
    format = meta.get("format", FAISS_FORMAT)
    default = "faiss" if format == FAISS_FORMAT or format in PARTITIONED_FORMATS else "lucene-impact"
    return str(format), str(meta.get("engine") or default)


def engine_class(format: str, engine: str, folder: Path | None = None) -> type:
    target = engines().get((format, engine))
    if target is None:
        known = ", ".join(sorted({f"{f} {e}" for f, e in engines()}))
        raise EmbedkitError(f"no engine opens '{format}' '{engine}' (registered: {known})", path=folder)
    return _load(target)


def open_index(folder: str | Path, **options: Any) -> Any:
    """The index in ``folder``, opened by its engine; a folder with a store is a ``LiveIndex`` over it.

    ``options`` go to the engine's ``open`` (``use_gpu``, ``vectors`` for FAISS). Files are verified first.
    """
    folder = Path(folder)
    format, engine = engine_of(folder)
    if (folder / STORE).is_file():
        return _load(LIVE.get(engine, ROWS_LIVE)).load_live(folder)
    return engine_class(format, engine, folder).open(folder, **options)


def open_live(folder: str | Path, *, fields: dict[str, str] | None = None, vectors: Any = None) -> Any:
    """The index in ``folder`` opened for updates (its store made on first use, with the filterable ``fields``;
    ``vectors``: the embeddings folder, for an engine that keeps no exact rows)."""
    folder = Path(folder)
    _, engine = engine_of(folder)
    return _load(LIVE.get(engine, ROWS_LIVE)).open(folder, fields=fields, vectors=vectors)


def load_live(folder: str | Path) -> Any:
    """A folder that has a store, opened with its changes replayed (one line where it has none)."""
    folder = Path(folder)
    if not (folder / STORE).is_file():
        raise EmbedkitError("takes no updates yet: it has no store (embedkit index add makes one)", path=folder)
    return open_index(folder)


def _load(target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def verify_files(folder: Path, meta: dict[str, Any], required: tuple[str, ...] = ()) -> None:
    """Every file ``meta.json`` lists is there with its recorded sha256, and each of ``required`` is there (a folder
    written before ``files`` was recorded has only the second check)."""
    for name in required:
        if not (folder / name).exists():
            raise EmbedkitError(f"the index folder has no '{name}' file", path=folder)
    for name, digest in (meta.get("files") or {}).items():
        path = folder / name
        if not path.is_file():
            raise EmbedkitError("is missing from the index folder (meta.json lists it)", path=path)
        if sha256_file(path) != digest:
            raise EmbedkitError(
                "changed since it was written (its sha256 differs from meta.json); rebuild the index", path=path
            )


def record_files(folder: Path, skip: tuple[str, ...] = ("meta.json",)) -> dict[str, str]:
    """The sha256 of every file under ``folder`` (relative paths), for ``meta.json``'s ``files``."""
    return {
        path.relative_to(folder).as_posix(): sha256_file(path)
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.relative_to(folder).as_posix() not in skip
    }
