"""Reading an embeddings folder: its manifest, and its shard files verified against it.

Light on purpose (numpy, no model): ``embedkit index`` and the index builders read embeddings without loading torch.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.encode.layout import FORMAT, MANIFEST, SETTINGS, SETTINGS_FORMAT
from embedkit.errors import EmbedkitError
from embedkit.multivector import TokenRows
from embedkit.outputs import output_lock
from embedkit.rows import ROW_FORMATS, RowFormat, row_format
from embedkit.sparse import SparseRows
from embedkit.storage import load_npy, read_json, read_lines, sha256_file, write_json

# What makes two encodes the same: a shard written under one key is reused only under the same key.
KEY_FIELDS = ("settings", "corpus", "shard_size")


def read_manifest(path: Path) -> dict[str, Any] | None:
    """A manifest's content, or None if it does not exist (another worker may remove it at any moment)."""
    if not path.is_file():
        return None
    manifest = read_json(path)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise EmbedkitError(f"not an embeddings manifest (format {found!r})", path=path, field="format")
    return manifest


def key_of(manifest: dict[str, Any]) -> dict[str, Any]:
    return {name: manifest.get(name) for name in KEY_FIELDS}


def _differing(key: dict[str, Any], other: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(name, this value, other value)`` of each key field that differs, by name."""
    theirs = other.get("settings") or {}
    found = [(f"settings.{k}", v, theirs.get(k)) for k, v in (key["settings"] or {}).items() if v != theirs.get(k)]
    found += [(name, key.get(name), other.get(name)) for name in ("corpus", "shard_size") if key[name] != other[name]]
    return sorted(found, key=lambda item: item[0])


def differences(key: dict[str, Any], other: dict[str, Any]) -> str:
    """The key fields that differ, e.g. ``settings.max_length, shard_size``."""
    return ", ".join(name for name, _, _ in _differing(key, other))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def claim_folder(folder: Path, key: dict[str, Any], overwrite: bool) -> bool:
    """Record the settings every writer of ``folder`` shares, or refuse a writer whose settings differ.

    Shard files are named by their global index whatever the shard size, so two workers with another
    ``--shard-size`` (or model, max length, prompts, dtype) would overwrite each other's finished shards and both
    report success. The first writer records its key under a lock; every later one compares (a folder from before
    this file existed is judged by its manifests). ``overwrite`` records the new key: the old run is replaced.
    True when this call wrote the record.
    """
    path = folder / SETTINGS
    with output_lock(path):
        recorded = recorded_key(folder)
        if recorded == key:
            return False
        if recorded is not None and not overwrite:
            found = _differing(key, recorded)
            values = "; ".join(f"{name} {_short(theirs)} there, {_short(ours)} here" for name, ours, theirs in found)
            raise EmbedkitError(
                f"holds embeddings made with other settings (differs in: {differences(key, recorded)}); {values}; "
                "give every worker the same settings, pass overwrite (--overwrite) to start again, or choose "
                "another folder",
                path=folder,
                field="--output",
            )
        write_json(path, {"format": SETTINGS_FORMAT, **key})
        return True


def unclaim_folder(folder: Path, own: Path, created: bool) -> None:
    """Undo a start that failed before any shard: this run's record and empty manifest, and the folder if this run
    made it, so the corrected command is not refused as "other settings". Any shard file keeps everything."""
    if any(folder.glob("shard-*")):
        return
    with output_lock(folder / SETTINGS):
        manifest = read_manifest(own) if own.is_file() else None
        if manifest is not None and not manifest.get("shards"):
            own.unlink(missing_ok=True)
        (folder / SETTINGS).unlink(missing_ok=True)
    if created:
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when nothing else is there


def check_claim(folder: Path, key: dict[str, Any]) -> None:
    """Refuse to go on once another run (with ``--overwrite``) recorded other settings while this one encoded."""
    recorded = recorded_key(folder)
    if recorded is not None and recorded != key:
        raise EmbedkitError(
            f"was taken over by a run with other settings (differs in: {differences(key, recorded)}) while this one "
            "encoded; this run stops so as not to overwrite its shards",
            path=folder,
            field="--output",
        )


def recorded_key(folder: Path) -> dict[str, Any] | None:
    """The key in ``encode-settings.json``; for an older folder, its ``manifest.json``'s or else its first part's."""
    path = folder / SETTINGS
    if path.is_file():
        recorded = read_json(path)
        if not isinstance(recorded, dict) or recorded.get("format") != SETTINGS_FORMAT:
            raise EmbedkitError("not an embeddings settings file", path=path, field="format")
        return key_of(recorded)
    for manifest_path in [folder / MANIFEST, *sorted(folder.glob("manifest.part-*-of-*.json"))]:
        manifest = read_manifest(manifest_path)
        if manifest is not None:
            return key_of(manifest)
    return None


@dataclass
class EmbeddingsFolder:
    """A finished (or partial) embeddings folder and its manifest."""

    path: Path
    manifest: dict[str, Any]
    encoded_shards: int = 0
    _verified: set[int] = field(default_factory=set, repr=False, compare=False)

    @classmethod
    def open(cls, path: str | Path) -> EmbeddingsFolder:
        path = Path(path)
        manifest = read_manifest(path / MANIFEST)
        if manifest is None:
            if any(path.glob("manifest.part-*-of-*.json")):
                raise EmbedkitError(
                    "encoded by several workers but not merged yet (no manifest.json); run "
                    "`embedkit encode --merge -o FOLDER` once every worker has finished",
                    path=path,
                )
            raise EmbedkitError("not an embeddings folder (no manifest.json)", path=path)
        return cls(path=path, manifest=manifest)

    @property
    def complete(self) -> bool:
        """The whole corpus is here; a worker's part is never complete, even once its own block is."""
        return bool(self.manifest.get("complete")) and "worker" not in self.manifest

    @property
    def settings(self) -> dict[str, Any]:
        return self.manifest["settings"]

    def shard(self, entry: dict[str, Any], mmap: bool = False) -> tuple[list[str], np.ndarray]:
        """One shard's ids and vectors, verified against the manifest: both files' sha256, the count and the shape.

        Hashing a shard costs far less than encoding it, and a flipped byte would otherwise surface as a wrong
        top hit, so every read is verified (once per shard and object).
        """
        vectors_path, ids_path = self.path / entry["embeddings"], self.path / entry["ids"]
        index = entry["index"]
        if index not in self._verified:
            files = [(vectors_path, "sha256"), (ids_path, "ids_sha256")]
            if "spans" in entry:
                files.append((self.path / entry["spans"], "spans_sha256"))
            for path, key in files:
                if not path.is_file():
                    raise EmbedkitError("missing from the embeddings folder; re-encode it", path=path)
                if key in entry and sha256_file(path) != entry[key]:
                    raise EmbedkitError(
                        "changed since it was encoded (its sha256 differs from manifest.json); re-encode with "
                        "'embedkit encode ... --overwrite'",
                        path=path,
                    )
            self._verified.add(index)
        ids = read_lines(ids_path)
        vectors = self.row_format.read(vectors_path, self.manifest["dim"], mmap)
        shape = self.row_format.shape(vectors)
        if shape != (entry["count"], self.manifest["dim"]) or len(ids) != entry["count"]:
            raise EmbedkitError(
                f"holds {shape} vectors and {len(ids)} ids, manifest.json says {entry['count']} x "
                f"{self.manifest['dim']}; re-encode it",
                path=vectors_path,
            )
        return ids, vectors

    def ids(self) -> list[str]:
        return [doc for entry in self.manifest["shards"] for doc in self.shard(entry, mmap=True)[0]]

    @property
    def chunking(self) -> dict[str, Any] | None:
        """How documents were cut into chunk rows (ids ``<doc>#<n>``), or None when each row is a document."""
        return self.settings.get("chunking")

    def spans(self) -> np.ndarray:
        """Each chunk row's ``[start, end)`` characters in its document's text (int64), in row order."""
        if self.chunking is None:
            raise EmbedkitError("holds whole documents, not chunks", path=self.path)
        parts = []
        for entry in self.manifest["shards"]:
            self.shard(entry, mmap=True)  # verifies the spans file with the shard
            parts.append(load_npy(self.path / entry["spans"], mmap=False))
        return np.concatenate(parts) if parts else np.empty((0, 2), dtype=np.int64)

    @property
    def row_format(self) -> RowFormat:
        """How this folder's rows are stored (``embedkit.rows``), from the model's recorded kind."""
        return row_format(self.settings.get("kind"))

    @property
    def sparse(self) -> bool:
        """Learned sparse vectors (``SparseRows`` per shard, ``.npz`` files) rather than dense rows."""
        return self.settings.get("kind") == "sparse"

    @property
    def multivector(self) -> bool:
        """Token vectors of a late-interaction model (``TokenRows`` per shard, ``.npz`` files)."""
        return self.settings.get("kind") == "multivector"

    def embeddings(self) -> np.ndarray | SparseRows | TokenRows:
        """All vectors in corpus order (float32 rows; ``SparseRows`` for a sparse model, ``TokenRows`` for a
        multi-vector one)."""
        shards = [self.shard(entry)[1] for entry in self.manifest["shards"]]
        return self.row_format.stack(shards, self.manifest["dim"], self.settings)

    def iter_shards(self):
        """``(ids, vectors)`` per shard, each memory-mapped, so a large corpus never sits in RAM at once."""
        for entry in self.manifest["shards"]:
            yield self.shard(entry, mmap=True)


def load_sparse_rows(path: Path, dim: int) -> SparseRows:
    """A sparse shard (``SparseRows``' three arrays in one ``.npz``); a damaged file is one line."""
    return ROW_FORMATS["sparse"].read(path, dim)


def load_token_rows(path: Path) -> TokenRows:
    """A multi-vector shard (``TokenRows``' two arrays in one ``.npz``); a damaged file is one line."""
    return ROW_FORMATS["multivector"].read(path, 0)


def shard_is_intact(folder: Path, shard: dict[str, Any]) -> bool:
    vectors, ids = folder / shard["embeddings"], folder / shard["ids"]
    if not (vectors.is_file() and ids.is_file()) or sha256_file(vectors) != shard["sha256"]:
        return False
    if "spans" in shard:
        spans = folder / shard["spans"]
        if not spans.is_file() or sha256_file(spans) != shard["spans_sha256"]:
            return False
    return "ids_sha256" not in shard or sha256_file(ids) == shard["ids_sha256"]
