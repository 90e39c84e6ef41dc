"""``LiveIndex``: an index folder that takes adds, deletes and upserts, filters by metadata and survives a kill.

The folder keeps pyserini's snapshot (``index``, ``docid``, ``meta.json``: every existing reader opens it as before)
and gains ``store.sqlite`` (``embedkit.index.store``), the one source of truth for what changed since. Opening replays
the store's rows after the snapshot onto the FAISS index; deletes are tombstones excluded by an ``IDSelector`` at
search time, or removed in place where FAISS can do so without renumbering (an in-memory IVF). ``compact`` rebuilds
the live documents into a new folder (snapshot and store) and swaps it in whole. Writers in any thread or process are
serialised by the folder's ``output_lock``; a search sees the state before a change or after it, never a mix.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from embedkit.errors import EmbedkitError
from embedkit.index.faiss_helpers import as_matrix, check_model_settings, check_whole
from embedkit.index.faiss_index import Index
from embedkit.index.index_files import read_index_folder
from embedkit.index.live_changes import LiveChanges
from embedkit.index.live_folder import check_folder, compact_folder, make_store
from embedkit.index.live_ondisk import delta_index, search_both
from embedkit.index.search_params import current_search_param, unwrap
from embedkit.index.store import STORE, Store, model_digest
from embedkit.protocols import Capabilities, Hits
from embedkit.validation import check_ids


class LiveIndex(LiveChanges, Index):
    """An ``Index`` whose folder has a store: ``add``, ``delete``, ``upsert``, ``compact``, ``check`` and
    ``search(..., filter=...)``. FAISS ids are the store's keys; ``ids[key]`` is ``None`` once deleted."""

    path: Path
    store: Store
    FULL_SCAN_BYTES = 10_000 * 1024  # matching vectors up to this size are searched exactly (Qdrant's default)
    make_store = staticmethod(make_store)

    @property
    def flat(self) -> bool:
        """Whether FAISS's own search is exact (a ``Flat`` index): then it searches every filter itself."""
        return isinstance(unwrap(self.faiss_index), faiss.IndexFlat)

    @classmethod
    def load_live(cls, path: str | Path) -> LiveIndex:
        """Open a folder that has a store (read-only until a write), replaying the store onto the snapshot."""
        path = Path(path).absolute()
        for _ in range(3):  # a compaction may swap the folder between reading the snapshot and the store
            store = Store(path / STORE)
            index, ids, meta = read_index_folder(path)
            if store.snapshot_count == len(ids) and store.inode == (path / STORE).stat().st_ino:
                break
            store.close()
        else:
            raise EmbedkitError("the snapshot and the store disagree; run 'embedkit index check'", path=path)
        if meta.get("binary"):
            raise EmbedkitError("updates need a float index, not a binary one", path=path)
        live = cls(index, list(ids), meta)
        live.delta = delta_index(path) if meta.get("on_disk") else None  # added vectors of an on-disk IVF
        live.folder, live.path, live.store = path, path, store
        live._lock, live._torch = threading.RLock(), False
        live.dead = set()
        live.in_place = faiss.try_extract_index_ivf(index) is not None and live.delta is None
        live.next_key, live.version, live.live_count = len(ids), 0, len(ids)
        if live.search_params:
            live.set_search_params(live.search_params.get("nprobe"), live.search_params.get("efSearch"))
        live._replay(store.snapshot_count)
        return live

    def __len__(self) -> int:
        return self.live_count

    @property
    def capabilities(self) -> Capabilities:
        return replace(super().capabilities, updatable=True, filterable=True)

    # --- reading changes -------------------------------------------------------------------------------------------

    def _replay(self, first_key: int) -> None:
        """Add the store's rows from ``first_key`` and apply deletes newer than ``self.version``, all read in one
        transaction (one consistent state, whatever other writers commit meanwhile)."""
        with self.store.reading():
            version = self.store.version()
            rows = self.store.rows_from(first_key)
            deleted = self.store.deleted_after(self.version)
        if rows:
            keys = np.array([row[0] for row in rows], dtype=np.int64)
            if keys[0] != self.next_key or keys[-1] != self.next_key + len(keys) - 1:
                raise EmbedkitError("the store's keys have a gap; run 'embedkit index check'", path=self.store.path)
            vectors = np.stack([row[2] for row in rows])
            if self.delta is not None:
                self.delta.add_with_ids(vectors, keys)
            elif self.in_place:
                self.faiss_index.add_with_ids(vectors, keys)
            else:
                self.faiss_index.add(vectors)
            self.ids.extend(row[1] for row in rows)
            self.next_key += len(rows)
            self.live_count += len(rows)
        deleted = [key for key in deleted if key < self.next_key and self.ids[key] is not None]
        if deleted:
            if self.in_place:
                self.faiss_index.remove_ids(faiss.IDSelectorBatch(np.array(deleted, dtype=np.int64)))
            else:
                self.dead.update(deleted)
            for key in deleted:
                self.ids[key] = None
            self.live_count -= len(deleted)
        self.version = version

    # --- writing ---------------------------------------------------------------------------------------------------

    def _write(self, ids, vectors, texts, metadata, model, model_settings, *, replace: bool) -> int:
        ids = check_ids(ids, "ids")
        if model is not None:
            model_settings = model.settings
        if model_settings is not None and self.meta.get("model"):
            check_model_settings(self.meta["model"], model_settings)
        row_ids, vectors, hashes, metadata = self.documents_to_write(ids, vectors, texts, metadata, model)
        vectors = as_matrix(vectors, "vectors")
        if vectors.shape != (len(row_ids), self.dim):
            raise EmbedkitError(f"{len(row_ids)} ids need {len(row_ids)} x {self.dim} vectors, not {vectors.shape}")
        if not np.isfinite(vectors).all():
            raise EmbedkitError("a vector holds NaN or infinity", field="vectors")
        digest = model_digest(model_settings or self.meta.get("model"))
        return self._commit(ids, row_ids, vectors, metadata, hashes, digest, replace)

    # --- search ----------------------------------------------------------------------------------------------------

    def search(self, queries: np.ndarray, k: int = 10, *, filter: str | None = None, **options: Any):
        """``Index.search``, with an optional metadata ``filter`` applied before the top-``k``."""
        with self._lock:  # the ids of the state searched, not of a change committed since
            scores, rows = self.search_rows(queries, k, filter=filter, **options)
            return Hits(scores, [[self.ids[j] for j in row if j >= 0] for row in rows])

    def search_rows(self, queries: np.ndarray, k: int = 10, *, filter: str | None = None, nprobe: int | None = None,
                    ef_search: int | None = None, rescore: int | None = None, batch_size: int = 4096):  # fmt: skip
        """Top-``k`` scores and keys; with ``filter``, only live documents matching it, ``k`` whenever ``k`` match.

        An approximate index searches a filter exactly over the matching documents' stored vectors when they are
        few (``FULL_SCAN_BYTES``, Qdrant's ``full_scan_threshold``) or when its own search finds fewer than ``k``.
        """
        if rescore or self.search_params.get("rescore"):
            raise EmbedkitError("rescoring is not available on an index that takes updates", field="rescore")
        queries = as_matrix(queries, "queries")
        if queries.shape[1] != self.dim:
            raise EmbedkitError(f"query dimension {queries.shape[1]} does not match the index's {self.dim}")
        k = check_whole(k, "k", 1, maximum=None)
        self.refresh()
        with self._lock, self._temporary({"nprobe": nprobe, "efSearch": ef_search}):
            allowed = None if filter is None else self.store.matching_keys(filter)
            k = min(k, len(self) if allowed is None else len(allowed))
            if k == 0:  # nothing matches, or every document is deleted: no hits, not an error
                return np.empty((len(queries), 0), np.float32), np.empty((len(queries), 0), np.int64)
            if allowed is None and not self.dead:
                selector = None
            elif allowed is None:
                selector = faiss.IDSelectorNot(faiss.IDSelectorBatch(np.fromiter(self.dead, dtype=np.int64)))
            else:
                selector = faiss.IDSelectorBatch(allowed)
            params = self._params(selector)
            scan = allowed is not None and not self.flat and len(allowed) * self.dim * 4 <= self.FULL_SCAN_BYTES
            matching = self.store.vectors_of(allowed) if scan else None
            scores = np.empty((len(queries), k), dtype=np.float32)
            keys = np.full((len(queries), k), -1, dtype=np.int64)
            for start in range(0, len(queries), batch_size):
                batch = queries[start : start + batch_size]
                if scan or not k:
                    found, rows = _exact(batch, matching, allowed, k, self.metric) if k else (scores[:0], keys[:0])
                else:
                    found, rows = search_both(self.faiss_index, self.delta, batch, k, params, self.metric)
                if allowed is not None and k and (rows < 0).any():  # FAISS found fewer than k: exact over them
                    matching = self.store.vectors_of(allowed) if matching is None else matching
                    found, rows = _exact(batch, matching, allowed, k, self.metric)
                scores[start : start + len(batch)], keys[start : start + len(batch)] = found, rows
        return scores, keys

    def _params(self, selector: Any) -> Any:
        """FAISS search parameters carrying ``selector`` and the index's current nprobe / efSearch."""
        if selector is None and self.delta is None:
            return None
        if faiss.try_extract_index_ivf(self.faiss_index) is not None:  # the delta searched as deep as the index
            return faiss.SearchParametersIVF(sel=selector, nprobe=current_search_param(self.faiss_index, "nprobe"))
        if hasattr(unwrap(self.faiss_index), "hnsw"):
            return faiss.SearchParametersHNSW(sel=selector, efSearch=current_search_param(self.faiss_index, "efSearch"))
        return faiss.SearchParameters(sel=selector)

    # --- compaction and checks -------------------------------------------------------------------------------------

    def _write_compacted(self, target: Path, overwrite: bool) -> dict[str, Any]:
        return compact_folder(self, target, overwrite)

    def check(self) -> dict[str, Any]:
        """Whether the store, the snapshot and the vectors agree (``embedkit index check``)."""
        self.refresh()
        with self._lock:
            return check_folder(self)


def _exact(queries: np.ndarray, vectors: np.ndarray, keys: np.ndarray, k: int, metric: str):
    """FAISS's exact search over ``vectors`` (whose keys are ``keys``), as keys."""
    flat = faiss.IndexFlatIP(vectors.shape[1]) if metric == "ip" else faiss.IndexFlatL2(vectors.shape[1])
    flat.add(vectors)
    scores, rows = flat.search(queries, k)
    return scores, np.where(rows >= 0, keys[np.maximum(rows, 0)], -1)

