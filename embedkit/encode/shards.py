"""Stream a corpus to a folder of ``.npy`` shards plus ``manifest.json``.

The manifest is rewritten (atomically) after each shard, so a killed run resumes from the last complete shard and
a rerun with unchanged settings is a cache hit that encodes nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from embedkit.data.beir import DOC_TEXT_RULE, doc_text
from embedkit.errors import EmbedkitError
from embedkit.models.embedding_model import EmbeddingModel
from embedkit.report.environment import library_versions
from embedkit.storage import load_npy, save_npy, sha256_file, write_json, write_lines

MANIFEST = "manifest.json"
FORMAT = "embedkit.embeddings/1"


def _columns(corpus: Any, start: int, stop: int) -> tuple[list[str], list[str]]:
    """Ids and document texts of rows ``start:stop`` of a ``Dataset`` or a list of dicts."""
    rows = corpus[start:stop]
    if isinstance(rows, dict):  # a datasets.Dataset slice is a dict of columns
        titles = rows.get("title") or [""] * len(rows["_id"])
        docs = [{"title": t, "text": x} for t, x in zip(titles, rows["text"])]
        return list(rows["_id"]), [doc_text(d) for d in docs]
    return [str(d["_id"]) for d in rows], [doc_text(d) for d in rows]


def corpus_fingerprint(corpus: Any, chunk: int = 10_000) -> str:
    """A content hash of the ids and texts as they will be encoded."""
    digest = hashlib.sha256()
    for start in range(0, len(corpus), chunk):
        ids, texts = _columns(corpus, start, start + chunk)
        for doc_id, text in zip(ids, texts):
            digest.update(doc_id.encode() + b"\0" + text.encode() + b"\0")
    return digest.hexdigest()


@dataclass
class EmbeddingsFolder:
    """A finished (or partial) embeddings folder and its manifest."""

    path: Path
    manifest: dict[str, Any]
    encoded_shards: int = 0

    @classmethod
    def open(cls, path: str | Path) -> EmbeddingsFolder:
        import json

        path = Path(path)
        manifest_path = path / MANIFEST
        if not manifest_path.is_file():
            raise EmbedkitError("not an embeddings folder (no manifest.json)", path=path)
        try:
            manifest = json.loads(manifest_path.read_text())
        except json.JSONDecodeError as err:
            raise EmbedkitError(f"malformed JSON ({err.msg})", path=manifest_path, line=err.lineno) from None
        if manifest.get("format") != FORMAT:
            raise EmbedkitError(f"unknown format {manifest.get('format')!r}", path=manifest_path, field="format")
        return cls(path=path, manifest=manifest)

    @property
    def complete(self) -> bool:
        return bool(self.manifest.get("complete"))

    @property
    def settings(self) -> dict[str, Any]:
        return self.manifest["settings"]

    def ids(self) -> list[str]:
        ids: list[str] = []
        for shard in self.manifest["shards"]:
            ids.extend((self.path / shard["ids"]).read_text(encoding="utf-8").splitlines())
        return ids

    def embeddings(self) -> np.ndarray:
        """All vectors in corpus order (float32)."""
        shards = [load_npy(self.path / s["embeddings"]) for s in self.manifest["shards"]]
        if not shards:
            return np.empty((0, self.manifest["dim"]), dtype=np.float32)
        return np.concatenate(shards, axis=0)

    def iter_shards(self):
        """``(ids, vectors)`` per shard, each memory-mapped, so a large corpus never sits in RAM at once."""
        for shard in self.manifest["shards"]:
            ids = (self.path / shard["ids"]).read_text(encoding="utf-8").splitlines()
            yield ids, load_npy(self.path / shard["embeddings"], mmap=True)


def _shard_is_intact(folder: Path, shard: dict[str, Any]) -> bool:
    vectors, ids = folder / shard["embeddings"], folder / shard["ids"]
    return vectors.is_file() and ids.is_file() and sha256_file(vectors) == shard["sha256"]


def encode_to_folder(
    model: EmbeddingModel,
    corpus: Any,
    folder: str | Path,
    shard_size: int = 10_000,
    overwrite: bool = False,
    show_progress: bool | None = None,
) -> EmbeddingsFolder:
    """Encode ``corpus`` into ``folder``, reusing every intact shard encoded earlier with the same settings."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(".*.tmp"):
        stale.unlink()
    if len(corpus) == 0:
        raise EmbedkitError("the corpus is empty")
    key = {
        "settings": model.settings,
        "corpus": {"sha256": corpus_fingerprint(corpus), "documents": len(corpus), "doc_text": DOC_TEXT_RULE},
        "shard_size": shard_size,
    }
    done: dict[int, dict[str, Any]] = {}
    if (folder / MANIFEST).is_file():
        previous = EmbeddingsFolder.open(folder).manifest
        old_key = {name: previous.get(name) for name in key}
        if old_key != key and not overwrite:
            changed = sorted(
                [f"settings.{k}" for k in key["settings"] if key["settings"][k] != (old_key["settings"] or {}).get(k)]
                + [name for name in ("corpus", "shard_size") if key[name] != old_key[name]]
            )
            raise EmbedkitError(
                f"holds embeddings made with other settings (differs in: {', '.join(changed)}); "
                "pass overwrite (--overwrite) or choose another folder",
                path=folder / MANIFEST,
            )
        if old_key != key:  # overwrite: nothing of the old run may survive under the new manifest
            for old in [*folder.glob("shard-*.npy"), *folder.glob("shard-*.docid"), folder / MANIFEST]:
                old.unlink()
        else:
            done = {s["index"]: s for s in previous["shards"] if _shard_is_intact(folder, s)}

    num_shards = (len(corpus) + shard_size - 1) // shard_size
    manifest: dict[str, Any] = {
        "format": FORMAT,
        **key,
        "dim": model.dim,
        "dtype": "float32",
        "num_shards": num_shards,
        "count": 0,
        "complete": False,
        "shards": [],
        "library_versions": library_versions(),
    }
    encoded = 0
    show = len(corpus) >= 1000 if show_progress is None else show_progress
    with tqdm(total=len(corpus), desc="Encoding corpus", unit="doc", disable=not show) as bar:
        for index in range(num_shards):
            start, stop = index * shard_size, min(len(corpus), (index + 1) * shard_size)
            if index in done:
                bar.update(stop - start)
            else:
                ids, texts = _columns(corpus, start, stop)
                vectors = model.encode(texts, prompt=model.document_prompt, progress=bar)
                name = f"shard-{index:05d}"
                save_npy(folder / f"{name}.npy", vectors)
                write_lines(folder / f"{name}.docid", ids)
                done[index] = {
                    "index": index,
                    "embeddings": f"{name}.npy",
                    "ids": f"{name}.docid",
                    "count": len(ids),
                    "sha256": sha256_file(folder / f"{name}.npy"),
                }
                encoded += 1
            manifest["shards"] = [done[i] for i in sorted(done)]
            manifest["count"] = sum(s["count"] for s in manifest["shards"])
            manifest["complete"] = len(done) == num_shards
            write_json(folder / MANIFEST, manifest)
    return EmbeddingsFolder(path=folder, manifest=manifest, encoded_shards=encoded)
