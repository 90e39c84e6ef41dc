"""The SQLite store of an index that takes updates: ids, keys, text hashes, metadata, rows (float vectors for FAISS,
any family's row bytes from ``embedkit.rows`` otherwise).

One table, ``documents``, is both the document store and the append log of the vectors: FAISS id ``key`` is the row's
integer key, given in order and never reused, so the FAISS snapshot beside the store holds keys ``0 ..
snapshot_count - 1`` and every row after them is an added vector to replay on open. A delete marks its row
(``deleted_version``) instead of removing it, so the log stays whole until a compaction folds it into a new snapshot.
Each change is one SQLite transaction in WAL mode with ``synchronous=FULL``: after a kill the store is as it was
before the change or after it, and the vectors are derived from it, so the two cannot disagree.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.errors import EmbedkitError
from embedkit.index.filters import FIELD_TYPES, check_fields, check_value, compile_filter
from embedkit.storage import NEW_MARK, fsync_folder, token

STORE = "store.sqlite"
STORE_FORMAT = "embedkit.store/1"


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def model_digest(settings: dict[str, Any] | None) -> str | None:
    """A short name for the model settings that encoded a document (the full settings are in meta.json)."""
    if not settings:
        return None
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _connect(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=600)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    return connection


class Store:
    """An open ``store.sqlite``; callers serialise writers (``output_lock``) and threads (their own lock)."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise EmbedkitError("no store in this index folder", path=path)
        self.path = path
        self.inode = path.stat().st_ino  # before connecting: a swap in between shows as a change on the next look
        try:
            self.connection = _connect(path)
            settings = dict(self.connection.execute("SELECT name, value FROM settings").fetchall())
        except sqlite3.DatabaseError as err:
            raise EmbedkitError(f"not a readable embedkit store ({err})", path=path) from None
        if json.loads(settings.get("format", "null")) != STORE_FORMAT:
            raise EmbedkitError(f"not an {STORE_FORMAT} store", path=path)
        self.fields: dict[str, str] = json.loads(settings["fields"])
        self.dim = int(json.loads(settings["dim"]))
        self.snapshot_count = int(json.loads(settings["snapshot_count"]))

    def close(self) -> None:
        self.connection.close()

    # --- making one ------------------------------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        path: Path,
        *,
        fields: dict[str, str],
        dim: int,
        snapshot_ids: Sequence[str],
        vectors: np.ndarray | None,
        model: dict[str, Any] | None,
        version: int = 0,
        live_of: Store | None = None,
    ) -> None:
        """Write a new store at ``path`` in one step (built beside it, then renamed) for a snapshot of
        ``snapshot_ids``: with their float ``vectors`` (row ``i`` = key ``i``), or with ``live_of``'s live rows
        renumbered from 0 in key order (a compaction; ``snapshot_ids`` are then those rows' ids)."""
        fields = check_fields(fields)
        temporary = path.parent / f".{path.name}{NEW_MARK}{token()}"
        try:
            connection = _connect(temporary)
            columns = "".join(f', "f_{name}" {FIELD_TYPES[kind]}' for name, kind in fields.items())
            connection.executescript(
                f"""
                CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT NOT NULL);
                CREATE TABLE documents (
                    key INTEGER PRIMARY KEY, id TEXT NOT NULL, text_sha256 TEXT, model TEXT, added REAL NOT NULL,
                    added_version INTEGER NOT NULL, deleted_version INTEGER, metadata TEXT, vector BLOB NOT NULL
                    {columns});
                CREATE UNIQUE INDEX live_ids ON documents(id) WHERE deleted_version IS NULL;
                CREATE INDEX deleted ON documents(deleted_version) WHERE deleted_version IS NOT NULL;
                """
                + "".join(f'CREATE INDEX "by_{name}" ON documents("f_{name}");' for name in fields)
            )
            values = {
                "format": STORE_FORMAT,
                "fields": fields,
                "dim": dim,
                "snapshot_count": len(snapshot_ids),
                "version": version,
                "model": model,
            }
            connection.execute("BEGIN")
            connection.executemany(
                "INSERT INTO settings VALUES (?, ?)", [(k, json.dumps(v)) for k, v in values.items()]
            )
            if live_of is None:
                connection.executemany(
                    "INSERT INTO documents (key, id, added, added_version, vector) VALUES (?, ?, ?, 0, ?)",
                    (
                        (key, doc_id, time.time(), _blob(vectors[key])) for key, doc_id in enumerate(snapshot_ids)
                    ),
                )
            else:
                connection.execute("COMMIT")
                connection.execute("ATTACH DATABASE ? AS old", (str(live_of.path),))
                connection.execute("BEGIN")
                names = "id, text_sha256, model, added, added_version, metadata, vector" + "".join(
                    f', "f_{name}"' for name in fields
                )
                connection.execute(
                    f"INSERT INTO main.documents (key, {names}) SELECT row_number() OVER (ORDER BY key) - 1, {names}"
                    " FROM old.documents WHERE deleted_version IS NULL ORDER BY key"
                )
            connection.execute("COMMIT")
            connection.close()  # a clean close folds the WAL into the file: one file to rename
            os.rename(temporary, path)
            fsync_folder(path.parent)
        finally:
            for leftover in (temporary, *(Path(f"{temporary}{end}") for end in ("-wal", "-shm"))):
                with contextlib.suppress(FileNotFoundError):
                    leftover.unlink()

    # --- reading ---------------------------------------------------------------------------------------------------

    def setting(self, name: str) -> Any:
        row = self.connection.execute("SELECT value FROM settings WHERE name = ?", (name,)).fetchone()
        return None if row is None else json.loads(row[0])

    def version(self) -> int:
        return int(self.setting("version"))

    def next_key(self) -> int:
        row = self.connection.execute("SELECT max(key) FROM documents").fetchone()
        return 0 if row[0] is None else int(row[0]) + 1

    def rows_from(self, key: int) -> list[tuple[int, str, np.ndarray, bool]]:
        """``(key, id, vector, deleted)`` of every row from ``key`` on, in key order: the log to replay."""
        rows = self.connection.execute(
            "SELECT key, id, vector, deleted_version IS NOT NULL FROM documents WHERE key >= ? ORDER BY key", (key,)
        ).fetchall()
        return [(k, i, np.frombuffer(v, dtype=np.float32), bool(d)) for k, i, v, d in rows]

    def deleted_after(self, version: int) -> list[int]:
        rows = self.connection.execute("SELECT key FROM documents WHERE deleted_version > ?", (version,)).fetchall()
        return [row[0] for row in rows]

    def live_keys_of(self, ids: Sequence[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for start in range(0, len(ids), 500):
            part = list(ids[start : start + 500])
            marks = ",".join("?" * len(part))
            query = f"SELECT id, key FROM documents WHERE deleted_version IS NULL AND id IN ({marks})"
            found.update(self.connection.execute(query, part).fetchall())
        return found

    def live_keys_of_documents(self, ids: Sequence[str]) -> dict[str, list[int]]:
        """Each document's live chunk rows (ids ``<document>#<n>``), in key order; a document without one is absent."""
        found: dict[str, list[int]] = {}
        query = "SELECT key, id FROM documents WHERE deleted_version IS NULL AND id >= ? AND id < ? ORDER BY key"
        for doc_id in ids:  # the range holds '<doc>#...' rows; a row of document '<doc>#x' is told apart by its id
            rows = self.connection.execute(query, (f"{doc_id}#", f"{doc_id}$")).fetchall()
            keys = [key for key, row_id in rows if row_id.rpartition("#")[0] == doc_id]
            if keys:
                found[doc_id] = keys
        return found

    def matching_keys(self, expression: str, flag: str = "filter") -> np.ndarray:
        """The keys of live documents matching a filter expression, sorted."""
        sql, params = compile_filter(expression, self.fields, flag)
        query = f"SELECT key FROM documents WHERE deleted_version IS NULL AND {sql} ORDER BY key"
        try:
            rows = self.connection.execute(query, params).fetchall()
        except sqlite3.OperationalError as err:  # e.g. deeper than SQLite's expression limit
            raise EmbedkitError(f"SQLite cannot run this filter ({err})", field=flag) from None
        return np.array([row[0] for row in rows], dtype=np.int64)

    def vectors_of(self, keys: np.ndarray) -> np.ndarray:
        out = np.empty((len(keys), self.dim), dtype=np.float32)
        position = {int(key): i for i, key in enumerate(keys)}
        for start in range(0, len(keys), 500):
            part = [int(key) for key in keys[start : start + 500]]
            query = f"SELECT key, vector FROM documents WHERE key IN ({','.join('?' * len(part))})"
            for key, blob in self.connection.execute(query, part):
                out[position[key]] = np.frombuffer(blob, dtype=np.float32)
        return out

    def blobs_of(self, keys: Sequence[int]) -> list[bytes]:
        """The stored row of each key, as bytes (``embedkit.rows``: any family's row)."""
        found: dict[int, bytes] = {}
        for start in range(0, len(keys), 500):
            part = [int(key) for key in keys[start : start + 500]]
            query = f"SELECT key, vector FROM documents WHERE key IN ({','.join('?' * len(part))})"
            found.update(self.connection.execute(query, part).fetchall())
        return [found[int(key)] for key in keys]

    def document(self, doc_id: str) -> dict[str, Any] | None:
        row = self.connection.execute(
            "SELECT key, text_sha256, model, added, metadata FROM documents WHERE deleted_version IS NULL AND id = ?",
            (doc_id,),
        ).fetchone()
        if row is None:
            return None
        key, digest, model, added, metadata = row
        return {"id": doc_id, "key": key, "text_sha256": digest, "model": model, "added": added,
                "metadata": json.loads(metadata) if metadata else {}}  # fmt: skip

    def live(self) -> tuple[np.ndarray, list[str], list[str | None]]:
        """Keys, ids and metadata JSON of the live documents in key order (what a compaction keeps)."""
        rows = self.connection.execute(
            "SELECT key, id, metadata FROM documents WHERE deleted_version IS NULL ORDER BY key"
        ).fetchall()
        return np.array([r[0] for r in rows], dtype=np.int64), [r[1] for r in rows], [r[2] for r in rows]

    # --- writing ---------------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Several reads that see one committed state (a WAL read transaction)."""
        self.connection.execute("BEGIN")
        try:
            yield
        finally:
            self.connection.execute("COMMIT")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[int]:
        """One change: ``BEGIN IMMEDIATE`` ... ``COMMIT``; yields the change's version number."""
        self.connection.execute("BEGIN IMMEDIATE")
        try:
            version = self.version() + 1
            self.connection.execute("UPDATE settings SET value = ? WHERE name = 'version'", (json.dumps(version),))
            yield version
            self.connection.execute("COMMIT")
        except BaseException:
            self.connection.execute("ROLLBACK")
            raise

    def delete(self, keys: Sequence[int], version: int) -> None:
        self.connection.executemany(
            "UPDATE documents SET deleted_version = ? WHERE key = ?", [(version, int(key)) for key in keys]
        )

    def insert(
        self,
        version: int,
        ids: Sequence[str],
        vectors: np.ndarray,
        metadata: Sequence[dict[str, Any] | None],
        hashes: Sequence[str | None],
        model: str | None,
    ) -> None:
        """Append rows with the next keys, in order."""
        first, now = self.next_key(), time.time()
        names = list(self.fields)
        columns = "".join(f', "f_{name}"' for name in names)
        marks = ", ?" * len(names)
        rows = []
        for offset, (doc_id, vector, meta, digest) in enumerate(zip(ids, vectors, metadata, hashes, strict=True)):
            meta = meta or {}
            typed = [check_value(meta.get(name), self.fields[name], f"document '{doc_id}' field '{name}'", "metadata")
                     for name in names]  # fmt: skip
            blob = _blob(vector)
            try:
                text = json.dumps(meta, sort_keys=True, allow_nan=False) if meta else None
            except (TypeError, ValueError) as err:
                raise EmbedkitError(f"document '{doc_id}': not JSON ({err})", field="metadata") from None
            rows.append((first + offset, doc_id, digest, model, now, version, text, blob, *typed))
        self.connection.executemany(
            "INSERT INTO documents (key, id, text_sha256, model, added, added_version, metadata, vector"
            f"{columns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?{marks})",
            rows,
        )

    def integrity(self) -> str:
        return str(self.connection.execute("PRAGMA integrity_check").fetchone()[0])


def _blob(row: Any) -> bytes:
    """A row as stored: bytes already made by its row format, or a dense vector as float32."""
    return row if isinstance(row, bytes) else np.ascontiguousarray(row, dtype=np.float32).tobytes()
