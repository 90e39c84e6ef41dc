"""``RowsLiveIndex``: a living index over any engine that takes no updates of its own (sparse, multi-vector).

It holds the engine's snapshot and the folder's ``store.sqlite`` (``embedkit.index.store``), which keeps every
document's row as bytes of its family's row format (``embedkit.rows``) with its id, metadata and the log of changes.
A search asks the snapshot deep enough that ``k`` live documents remain after its deleted ones are dropped, scores
the documents added since exactly (the family's own similarity), and merges the two in trec_eval's order; a filter
selects documents in the store and scores their rows exactly, so it applies before the top-k. ``compact`` rebuilds
the engine from the live rows (``from_rows``) into a new folder swapped in whole, as a FAISS living index does.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.data.trec import top_hits
from embedkit.encode.folder import EmbeddingsFolder
from embedkit.errors import EmbedkitError
from embedkit.index.live_changes import LiveChanges
from embedkit.index.registry import engine_class, engine_of
from embedkit.index.store import STORE, Store, model_digest
from embedkit.models.encoder import check_model_settings
from embedkit.outputs import replace_folder
from embedkit.protocols import Capabilities, Hits
from embedkit.rows import RowFormat, row_format
from embedkit.validation import check_ids, check_whole


class RowsLiveIndex(LiveChanges):
    """An index folder of sparse or token rows that takes ``add``, ``delete``, ``upsert``, ``compact``, ``check``
    and ``search(..., filter=...)``; keys are the store's, ``ids[key]`` is ``None`` once deleted."""

    def __init__(self, path: Path, base: Any, store: Store) -> None:
        self.path, self.base, self.store = path, base, store
        self.row_format: RowFormat = row_format(base.family)
        self.snapshot_ids: list[str] = store_ids(store)[: store.snapshot_count]  # the store's first rows
        self._lock = threading.RLock()
        self.ids: list[str | None] = list(self.snapshot_ids)  # by key, None once deleted
        self.added_keys: list[int] = []
        self.added = self.row_format.from_blobs([], store.dim, self.model_settings)
        self.dead_snapshot: set[str] = set()
        self.version, self.live_count = 0, len(self.snapshot_ids)
        self._replay()

    @property
    def engine(self) -> str:
        return self.base.engine

    @property
    def family(self) -> str:
        return self.base.family

    @property
    def search_parameters(self) -> tuple[str, ...]:
        return self.base.search_parameters

    @property
    def capabilities(self) -> Capabilities:
        return replace(self.base.capabilities, updatable=True, filterable=True)

    @property
    def model_settings(self) -> dict[str, Any]:
        return self.base.model_settings

    def bind_model(self, model: Any) -> None:
        bind = getattr(self.base, "bind_model", None)
        if bind is not None:
            bind(model)

    def __len__(self) -> int:
        return self.live_count

    # --- opening ---------------------------------------------------------------------------------------------------

    @classmethod
    def load_live(cls, path: str | Path) -> RowsLiveIndex:
        path = Path(path).absolute()
        for _ in range(3):  # a compaction may swap the folder between reading the snapshot and the store
            store = Store(path / STORE)
            base = engine_class(*engine_of(path), path).open(path)
            if store.snapshot_count == len(base) and store.inode == (path / STORE).stat().st_ino:
                return cls(path, base, store)
            store.close()
        raise EmbedkitError("the snapshot and the store disagree; run 'embedkit index check'", path=path)

    # --- reading changes -------------------------------------------------------------------------------------------

    @property
    def next_key(self) -> int:
        return len(self.ids)

    def _replay(self, first_key: int = 0) -> None:
        """Rebuild the in-memory view of the changes after the snapshot from one consistent read of the store."""
        with self.store.reading():
            version = self.store.version()
            rows = self.store.rows_from(len(self.snapshot_ids))
            deleted = set(self.store.deleted_after(0))
        live_added = [(key, doc_id) for key, doc_id, _, gone in rows if not gone]
        self.added_keys = [key for key, _ in live_added]
        blobs = self.store.blobs_of(self.added_keys)
        self.added = self.row_format.from_blobs(blobs, self.store.dim, self.model_settings)
        self.ids = list(self.snapshot_ids) + [doc_id for _, doc_id, _, _ in rows]
        for key in deleted:
            self.ids[key] = None
        self.dead_snapshot = {self.snapshot_ids[key] for key in deleted if key < len(self.snapshot_ids)}
        self.live_count = sum(doc_id is not None for doc_id in self.ids)
        self.version = version

    # --- writing ---------------------------------------------------------------------------------------------------

    def _write(self, ids, rows, texts, metadata, model, model_settings, *, replace: bool) -> int:
        ids = check_ids(ids, "ids")
        if model is not None:
            model.check(self)
            model_settings = model.settings
        elif model_settings is not None:
            check_model_settings(self.model_settings, model_settings, ("weights_sha256", "dim"))
        row_ids, rows, hashes, metadata = self.documents_to_write(ids, rows, texts, metadata, model)
        rows = self.row_format.check(rows, len(row_ids), self.store.dim)
        digest = model_digest(model_settings or self.model_settings)
        return self._commit(ids, row_ids, self.row_format.to_blobs(rows), metadata, hashes, digest, replace)

    # --- search ----------------------------------------------------------------------------------------------------

    def search(self, rows: Any, k: int, *, filter: str | None = None, **params: Any) -> Hits:
        """The top ``k`` live documents per query row; with ``filter``, of the documents whose metadata match
        (scored exactly); ``params``: the snapshot engine's own search parameters."""
        k = check_whole(k, "k", minimum=1)
        self.refresh()
        with self._lock:
            if filter is not None:
                keys = self.store.matching_keys(filter)
                documents = self.row_format.from_blobs(self.store.blobs_of(keys), self.store.dim, self.model_settings)
                return self._exact(rows, documents, [self.ids[key] for key in keys], k)
            ranked = [[] for _ in range(len(rows))]
            if len(self.base):
                depth = min(len(self.base), k + len(self.dead_snapshot))
                found = self.base.search(rows, depth, **params)
                dead = self.dead_snapshot
                ranked = [[hit for hit in found.ranked(i) if hit[0] not in dead] for i in range(len(rows))]
            if len(self.added):
                extra = self._exact(rows, self.added, [self.ids[key] for key in self.added_keys], k)
                ranked = [mine + extra.ranked(i) for i, mine in enumerate(ranked)]
            merged = []
            for hits in ranked:
                scores = np.array([score for _, score in hits], np.float32)
                merged.append(top_hits(scores, [doc for doc, _ in hits], k))
            return Hits.from_ranked(merged, k)

    def _exact(self, rows: Any, documents: Any, doc_ids: list[str], k: int) -> Hits:
        if not len(doc_ids):
            return Hits(np.zeros((len(rows), 0), np.float32), [[] for _ in range(len(rows))])
        scores = self.row_format.score(rows, documents)
        positive = self.row_format.positive_only
        return Hits.from_ranked([top_hits(row, doc_ids, k, positive_only=positive) for row in scores], k)

    # --- compaction and checks -------------------------------------------------------------------------------------

    def live_rows(self) -> tuple[list[str], Any]:
        keys, ids, _ = self.store.live()
        return ids, self.row_format.from_blobs(self.store.blobs_of(keys), self.store.dim, self.model_settings)

    def _write_compacted(self, target: Path, overwrite: bool) -> dict[str, Any]:
        ids, rows = self.live_rows()
        if not ids:
            raise EmbedkitError("every document is deleted; a compaction would leave an empty index", path=self.path)
        built = type(self.base).from_rows(rows, ids, self.model_settings, like=self.base)
        record = {"documents": len(ids), "removed": len(self.ids) - len(ids), "version": self.store.version()}
        with replace_folder(target, f"{self.row_format.kind}-index", overwrite=overwrite) as new:
            built.write_files(new)
            Store.create(new / STORE, fields=self.store.fields, dim=self.store.dim, snapshot_ids=ids, vectors=None,
                         model=self.store.setting("model"), version=record["version"], live_of=self.store)  # fmt: skip
        return record

    def check(self) -> dict[str, Any]:
        """Whether the store and the snapshot agree (``embedkit index check``)."""
        self.refresh()
        with self._lock:
            problems = []
            integrity = self.store.integrity()
            if integrity != "ok":
                problems.append(f"SQLite integrity check: {integrity}")
            if self.store.snapshot_count != len(self.snapshot_ids):
                problems.append(f"the store's snapshot has {self.store.snapshot_count} documents, the index "
                                f"{len(self.snapshot_ids)}")  # fmt: skip
            recorded = self.base.doc_ids
            if recorded is not None and list(recorded) != self.snapshot_ids:
                problems.append("the store's first rows are not the snapshot's ids in order")
            return {"ok": not problems, "documents": self.live_count, "version": self.version, "problems": problems}


def store_ids(store: Store) -> list[str]:
    return [row[0] for row in store.connection.execute("SELECT id FROM documents ORDER BY key").fetchall()]


def make_rows_store(path: Path, fields: dict[str, str], vectors: Any) -> None:
    """The first store of a snapshot: its ids and every document's row, from the engine or the embeddings folder."""
    base = engine_class(*engine_of(path), path).open(path)
    fmt = row_format(base.family)
    rows, ids = base.stored_rows(), base.doc_ids
    if isinstance(vectors, (str, Path, EmbeddingsFolder)):
        folder = vectors if isinstance(vectors, EmbeddingsFolder) else EmbeddingsFolder.open(vectors)
        if ids is not None and folder.ids() != list(ids):
            raise EmbedkitError("the embeddings folder lists other document ids than the index", path=folder.path)
        rows, ids = folder.embeddings(), folder.ids()
    elif vectors is not None:  # the rows themselves, in the index's order
        rows = vectors
    if rows is None or ids is None:
        raise EmbedkitError(f"the {base.engine} index keeps no exact rows: open it for updates with the embeddings "
                            "folder it was built from (open_live(folder, vectors=...))", path=path)  # fmt: skip
    if len(ids) != len(base) or fmt.shape(rows)[0] != len(ids):
        raise EmbedkitError(f"{fmt.shape(rows)[0]} rows and {len(ids)} ids for an index of {len(base)} documents",
                            path=path)  # fmt: skip
    Store.create(path / STORE, fields=fields, dim=fmt.shape(rows)[1], snapshot_ids=list(ids),
                 vectors=fmt.to_blobs(rows), model=base.model_settings)  # fmt: skip


RowsLiveIndex.make_store = staticmethod(make_rows_store)
