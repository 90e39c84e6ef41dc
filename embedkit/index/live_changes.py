"""What every living index shares, whatever holds its rows (FAISS in place: ``LiveIndex``; any other engine beside
its snapshot: ``RowsLiveIndex``): opening a folder for updates (its store made once, under the folder's lock), the
changes (add, upsert, delete: one store transaction each, serialised across threads and processes), noticing other
writers' changes, the stored record of a document, and a copy saved elsewhere.

A subclass gives ``make_store`` (the first store of a snapshot), ``load_live``, ``_replay(first_key)`` (apply the
store's rows from a key on), ``_write`` (check and insert rows) and ``_write_compacted(target, overwrite)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from embedkit.encode.shards import chunk_ids
from embedkit.errors import EmbedkitError
from embedkit.index.store import STORE, text_sha256
from embedkit.outputs import output_lock, recover
from embedkit.validation import check_ids


class LiveChanges:
    make_store: ClassVar[Any]  # (path, fields, vectors) -> None

    @classmethod
    def open(cls, path: str | Path, *, fields: dict[str, str] | None = None, vectors: Any = None) -> Any:
        """Open an index folder for updates, making its store on first use (declaring the filterable ``fields``
        and copying every document's row: ``vectors``, the embeddings folder it was built from, or the engine's own)."""
        path = Path(path).absolute()
        if not (path / STORE).is_file():
            with output_lock(path):
                recover(path)
                if not (path / STORE).is_file():
                    cls.make_store(path, fields or {}, vectors)
        live = cls.load_live(path)
        if fields is not None and fields != live.store.fields:
            raise EmbedkitError("the store was made with other filterable fields", path=path / STORE, field="fields")
        return live

    def refresh(self) -> None:
        """Apply what other writers committed since this object last looked (a compaction: reopen)."""
        with self._lock:
            try:
                swapped = (self.path / STORE).stat().st_ino != self.store.inode
            except FileNotFoundError:
                return  # mid-swap on a system without an atomic exchange: the next look finds it
            if swapped:
                fresh = type(self).load_live(self.path)
                self.store.close()
                lock = self._lock
                self.__dict__.update(fresh.__dict__)
                self._lock = lock
            elif self.store.version() != self.version:
                self._replay(self.next_key)

    def add(self, ids: Any, vectors: Any = None, *, texts: Any = None, metadata: Any = None, model: Any = None,
            model_settings: dict[str, Any] | None = None) -> int:  # fmt: skip
        """Add new documents (an id already in the index is refused: use ``upsert``); returns the version.

        Give their ``vectors`` (any family's rows), or ``texts`` and the ``model`` that encoded the index (its
        settings are checked against the index's); ``metadata`` is one JSON object (or ``None``) per document.
        """
        return self._write(ids, vectors, texts, metadata, model, model_settings, replace=False)

    def upsert(self, ids: Any, vectors: Any = None, *, texts: Any = None, metadata: Any = None, model: Any = None,
               model_settings: dict[str, Any] | None = None) -> int:  # fmt: skip
        """``add``, replacing documents whose ids are already in the index (in one transaction)."""
        return self._write(ids, vectors, texts, metadata, model, model_settings, replace=True)

    def delete(self, ids: Any) -> int:
        """Delete documents by id (an id not in the index is refused; a document's chunk rows go with it); returns
        the version."""
        ids = check_ids(ids, "ids")
        with output_lock(self.path), self._lock:  # searches wait for the transaction, not for anything before it
            self.refresh()
            with self.store.transaction() as version:
                found = self._live_keys(ids)
                missing = [doc_id for doc_id in ids if doc_id not in found]
                if missing:
                    raise EmbedkitError(f"document '{missing[0]}' is not in the index", path=self.path, field="ids")
                self.store.delete([key for keys in found.values() for key in keys], version)
            self.refresh()
        return version

    @property
    def chunked(self) -> bool:
        """Whether the rows are chunks (``<document>#<n>``): changes then address documents, whose rows follow."""
        return bool((self.model_settings or {}).get("chunking"))

    def _live_keys(self, ids: list[str]) -> dict[str, list[int]]:
        """Each live document's row keys: its one row, or all its chunk rows."""
        if self.chunked:
            return self.store.live_keys_of_documents(ids)
        return {doc_id: [key] for doc_id, key in self.store.live_keys_of(ids).items()}

    def _commit(self, ids, row_ids, rows, metadata, hashes, digest, replace: bool) -> int:
        """One transaction: the documents' earlier rows deleted (``replace``) or refused, the new rows inserted."""
        with output_lock(self.path), self._lock:
            self.refresh()
            with self.store.transaction() as version:
                found = self._live_keys(ids)
                if found and not replace:
                    first = next(doc_id for doc_id in ids if doc_id in found)
                    raise EmbedkitError(f"document '{first}' is already in the index; use upsert", field="ids")
                self.store.delete([key for keys in found.values() for key in keys], version)
                self.store.insert(version, row_ids, rows, metadata, hashes, digest)
            self.refresh()
        return version

    def documents_to_write(self, ids: list[str], rows: Any, texts: Any, metadata: Any, model: Any) -> tuple:
        """What an add or upsert writes, checked: ``(row ids, rows, each row's text sha256, its metadata)``. The
        rows are given, or the texts encoded by ``model``; an index of chunk rows takes ``Chunks`` (rows and chunks
        per document, as ``encode_chunks`` gives them), and each chunk row carries its document's metadata."""
        hashes: list[str | None] = [None] * len(ids)
        if texts is not None:
            if len(texts) != len(ids) or not all(isinstance(text, str) for text in texts):
                raise EmbedkitError(f"{len(ids)} ids need as many texts (strings)", field="texts")
            hashes = [text_sha256(text) for text in texts]
            if rows is None:
                if model is None:
                    raise EmbedkitError("texts without vectors need the model that encoded the index", field="model")
                rows = model.encode_chunks(list(texts)) if self.chunked else model.encode_documents(list(texts))
        if rows is None:
            raise EmbedkitError("give the documents' vectors, or their texts and the model", field="vectors")
        metadata = [None] * len(ids) if metadata is None else list(metadata)
        if len(metadata) != len(ids) or not all(meta is None or isinstance(meta, dict) for meta in metadata):
            raise EmbedkitError(f"{len(ids)} ids need as many metadata objects (or None)", field="metadata")
        if not self.chunked:
            return ids, rows, hashes, metadata
        counts = getattr(rows, "counts", None)
        if counts is None or len(counts) != len(ids):
            raise EmbedkitError(f"an index of chunk rows takes {len(ids)} documents' chunks (Chunks: rows and chunks "
                                "per document) or their texts and the model", field="vectors")  # fmt: skip
        repeat = counts.tolist()
        return (chunk_ids(ids, counts), rows.vectors, [h for h, n in zip(hashes, repeat) for _ in range(n)],
                [m for m, n in zip(metadata, repeat) for _ in range(n)])  # fmt: skip

    def document(self, doc_id: str) -> dict[str, Any] | None:
        """The stored record of a live document (key, text hash, model, time added, metadata), else ``None``."""
        self.refresh()
        with self._lock:
            return self.store.document(doc_id)

    def compact(self) -> dict[str, Any]:
        """Rebuild the live documents into a new snapshot and store, swapped in whole; returns meta's record."""
        with output_lock(self.path):
            self.refresh()
            record = self._write_compacted(self.path, True)
            self.refresh()
        return record

    def save(self, path: str | Path, overwrite: bool = False) -> Path:
        """The live documents, their metadata and the index's settings as a new, compacted living-index folder at
        ``path`` (this folder is left as it is; an existing index folder there is replaced only with ``overwrite``)."""
        path = Path(path).absolute()
        if path == self.path:
            self.compact()
            return path
        with output_lock(self.path), self._lock:  # no change commits while the copy reads the store
            self.refresh()
            self._write_compacted(path, overwrite)
        return path
