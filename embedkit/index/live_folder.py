"""Whole-folder operations of a ``LiveIndex``: its first store, compaction (``embedkit index compact``) and the
consistency check (``embedkit index check``)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import faiss
import numpy as np

from embedkit.errors import EmbedkitError
from embedkit.index.faiss_helpers import INDEX_KINDS, BuildSettings, new_index
from embedkit.index.faiss_index import Index
from embedkit.index.index_files import read_index_folder
from embedkit.index.live_ondisk import delta_index
from embedkit.index.ondisk import build_ondisk
from embedkit.index.search_params import unwrap
from embedkit.index.store import STORE, Store
from embedkit.index.vectors import Vectors
from embedkit.outputs import replace_folder

if TYPE_CHECKING:
    from embedkit.index.live import LiveIndex


def compact_folder(live: LiveIndex, target: Path | None = None, overwrite: bool = True) -> dict[str, Any]:
    """Build the live documents (in key order) into a new snapshot with the index's factory, reusing its trained
    quantizer, and a store renumbered to match; swap the folder in whole. Called holding the folder's lock.

    ``target`` (another folder: ``LiveIndex.save``) receives the compacted copy instead, replacing an index folder
    there only with ``overwrite``."""
    target = live.path if target is None else target
    keys, ids, _ = live.store.live()
    if not len(keys):
        raise EmbedkitError("every document is deleted; a compaction would leave an empty index", path=live.path)
    meta = live.meta
    factory = meta.get("factory") or ("Flat" if isinstance(unwrap(live.faiss_index), faiss.IndexFlat) else None)
    if factory is None:
        raise EmbedkitError("meta.json does not say the index's factory, so it cannot be rebuilt", path=live.path)
    params = meta.get("search_params") or {}
    settings = BuildSettings(
        factory, live.metric, use_gpu=False, seed=int(meta.get("seed") or 0),
        nprobe=params.get("nprobe"), ef_search=params.get("efSearch"),
    )  # fmt: skip
    trained = None
    if not new_index(live.dim, factory, live.metric).is_trained:
        empty = delta_index(live.path) if live.delta is not None else faiss.clone_index(live.faiss_index)
        empty.reset()
        trained = (empty, int(meta.get("trained_on") or 0))
    vectors = Vectors.of(live.store.vectors_of(keys), ids, meta.get("model"))
    version = live.store.version()
    record = {
        "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "documents": len(keys),
        "removed": live.next_key - len(keys),
        "version": version,
    }
    kept = {name: meta[name] for name in ("search_params", "exact_search") if name in meta}

    def write_store(new: Path) -> None:
        Store.create(
            new / STORE, fields=live.store.fields, dim=live.dim, snapshot_ids=ids, vectors=None,
            model=live.store.setting("model"), version=version, live_of=live.store,
        )  # fmt: skip

    if live.delta is not None:  # an on-disk index is written as one again, its new lists beside the store
        build_ondisk(vectors, target, settings, trained=trained, overwrite=overwrite,
                     meta_extra={**kept, "compaction": record}, also=write_store)  # fmt: skip
        return record
    built = Index.from_vectors(vectors, settings, trained=trained)
    built.meta.update({**kept, "compaction": record})
    with replace_folder(target, INDEX_KINDS, overwrite=overwrite) as new:
        built.write_files(new, target)
        write_store(new)
    return record


def check_folder(live: LiveIndex) -> dict[str, Any]:
    """What disagrees between the store, the snapshot files and the vectors searched; ``ok`` when nothing does."""
    problems: list[str] = []
    store, sql = live.store, live.store.connection
    integrity = store.integrity()
    if integrity != "ok":
        problems.append(f"SQLite integrity check: {integrity}")
    try:
        snapshot, snapshot_ids, _ = read_index_folder(live.path)
    except EmbedkitError as err:
        return {"ok": False, "problems": [*problems, str(err)]}
    if store.snapshot_count != len(snapshot_ids):
        problems.append(f"the store's snapshot has {store.snapshot_count} documents, 'docid' {len(snapshot_ids)}")
    rows = sql.execute("SELECT key, id, deleted_version IS NOT NULL FROM documents ORDER BY key").fetchall()
    if [row[0] for row in rows] != list(range(len(rows))):
        problems.append("the store's keys are not 0, 1, 2, ... (a gap or a repeat)")
    if [row[1] for row in rows[: len(snapshot_ids)]] != snapshot_ids:
        problems.append("the store's first rows are not the snapshot's ids in order")
    if len(rows) != live.next_key or any((live.ids[key] is None) != bool(gone) for key, _, gone in rows):
        problems.append("the searched ids differ from the store's live documents")
    live_ids = [row[1] for row in rows if not row[2]]
    if len(set(live_ids)) != len(live_ids):
        problems.append("an id is live twice")
    expected = len(live_ids) if live.in_place else len(rows)
    held = live.faiss_index.ntotal + (0 if live.delta is None else live.delta.ntotal)
    if held != expected:
        problems.append(f"FAISS holds {held} vectors, the store says {expected}")
    if isinstance(unwrap(snapshot), (faiss.IndexFlat, faiss.IndexHNSWFlat)) and len(snapshot_ids):
        stored = store.vectors_of(np.arange(len(snapshot_ids), dtype=np.int64))
        if not np.array_equal(stored, snapshot.reconstruct_n(0, len(snapshot_ids))):
            problems.append("the snapshot's vectors differ from the store's")
    return {
        "ok": not problems,
        "documents": len(live_ids),
        "tombstones": len(live.dead),
        "version": live.version,
        "snapshot_documents": len(snapshot_ids),
        "compaction": live.meta.get("compaction"),
        "problems": problems,
    }


def make_store(path: Path, fields: dict[str, str], vectors: Any) -> None:
    """The first store of a snapshot: its ids and their float vectors (exact, never a lossy reconstruction)."""
    snapshot = Index.load(path, use_gpu=False)
    if snapshot.binary:
        raise EmbedkitError("updates need a float index, not a binary one", path=path)
    if vectors is not None or (snapshot.meta.get("vectors") or {}).get("path"):
        if vectors is not None:
            snapshot.attach_vectors(vectors)
        batches = snapshot.vectors.batches(0, len(snapshot), 100_000)
        floats = np.concatenate([np.asarray(batch, dtype=np.float32) for _, batch in batches])
    elif not snapshot.meta.get("on_disk") and isinstance(
        unwrap(snapshot.faiss_index), (faiss.IndexFlat, faiss.IndexHNSWFlat, faiss.IndexIVFFlat)
    ):
        copy = faiss.clone_index(snapshot.faiss_index)
        if isinstance(unwrap(copy), faiss.IndexIVFFlat):
            faiss.extract_index_ivf(copy).make_direct_map()
        floats = copy.reconstruct_n(0, len(snapshot))
    else:
        raise EmbedkitError("the index keeps no exact vectors: give its embeddings folder (vectors=, --embeddings)")
    Store.create(path / STORE, fields=fields, dim=snapshot.dim, snapshot_ids=snapshot.ids, vectors=floats,
                 model=snapshot.meta.get("model"))  # fmt: skip
