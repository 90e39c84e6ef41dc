"""Stream a corpus to a folder of ``.npy`` shards plus ``manifest.json``.

The manifest is rewritten (atomically) after each shard, so a killed run resumes from the last complete shard and
a rerun with unchanged settings is a cache hit that encodes nothing.

Several workers can share the work: the corpus is cut into the same global shards as a single-process run, worker
``i`` of ``n`` encodes block ``i`` of ``n`` contiguous blocks of them into the same folder and keeps its own part
manifest (``manifest.part-0000i-of-0000n.json``), and a merge writes the ordinary ``manifest.json`` once every part
is complete, so whatever reads the folder never learns how it was encoded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from embedkit.data.beir import DOC_TEXT_RULE, corpus_fingerprint, doc_text
from embedkit.data.jsonl import check_id
from embedkit.encode.layout import (
    FORMAT,
    MANIFEST,
    PART_PATTERN,
    check_embeddings_folder,
    check_worker,
    part_name,
    shard_block,
)
from embedkit.environment import library_versions
from embedkit.errors import EmbedkitError
from embedkit.models.embedding_model import EmbeddingModel
from embedkit.storage import (
    load_npy,
    output_lock,
    read_json,
    read_lines,
    save_npy,
    sha256_file,
    write_json,
    write_lines,
)

KEY_FIELDS = ("settings", "corpus", "shard_size")


def _columns(corpus: Any, start: int, stop: int) -> tuple[list[str], list[str]]:
    """Ids (checked: they go into ``docid`` files, one a line) and document texts of rows ``start:stop``."""
    rows = corpus[start:stop]
    if isinstance(rows, dict):  # a datasets.Dataset slice is a dict of columns
        titles = rows.get("title") or [""] * len(rows["_id"])
        docs = [{"title": t, "text": x} for t, x in zip(titles, rows["text"])]
        ids = list(rows["_id"])
    else:
        docs, ids = rows, [d["_id"] for d in rows]
    ids = [check_id(doc_id, None, None, f"_id of document {start + i}") for i, doc_id in enumerate(ids)]
    return ids, [doc_text(d) for d in docs]


def _read_manifest(path: Path) -> dict[str, Any] | None:
    """A manifest's content, or None if it does not exist (another worker may remove it at any moment)."""
    if not path.is_file():
        return None
    manifest = read_json(path)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise EmbedkitError(f"not an embeddings manifest (format {found!r})", path=path, field="format")
    return manifest


def _key_of(manifest: dict[str, Any]) -> dict[str, Any]:
    return {name: manifest.get(name) for name in KEY_FIELDS}


def _differences(key: dict[str, Any], other: dict[str, Any]) -> str:
    """The key fields that differ, e.g. ``settings.max_length, shard_size``."""
    return ", ".join(
        sorted(
            [f"settings.{k}" for k in key["settings"] if key["settings"][k] != (other["settings"] or {}).get(k)]
            + [name for name in ("corpus", "shard_size") if key[name] != other[name]]
        )
    )


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
        manifest = _read_manifest(path / MANIFEST)
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
            for path, key in ((vectors_path, "sha256"), (ids_path, "ids_sha256")):
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
        vectors = load_npy(vectors_path, mmap=mmap)
        if vectors.shape != (entry["count"], self.manifest["dim"]) or len(ids) != entry["count"]:
            raise EmbedkitError(
                f"holds {vectors.shape} vectors and {len(ids)} ids, manifest.json says {entry['count']} x "
                f"{self.manifest['dim']}; re-encode it",
                path=vectors_path,
            )
        return ids, vectors

    def ids(self) -> list[str]:
        return [doc for entry in self.manifest["shards"] for doc in self.shard(entry, mmap=True)[0]]

    def embeddings(self) -> np.ndarray:
        """All vectors in corpus order (float32)."""
        shards = [self.shard(entry)[1] for entry in self.manifest["shards"]]
        if not shards:
            return np.empty((0, self.manifest["dim"]), dtype=np.float32)
        return np.concatenate(shards, axis=0)

    def iter_shards(self):
        """``(ids, vectors)`` per shard, each memory-mapped, so a large corpus never sits in RAM at once."""
        for entry in self.manifest["shards"]:
            yield self.shard(entry, mmap=True)


def _shard_is_intact(folder: Path, shard: dict[str, Any]) -> bool:
    vectors, ids = folder / shard["embeddings"], folder / shard["ids"]
    if not (vectors.is_file() and ids.is_file()) or sha256_file(vectors) != shard["sha256"]:
        return False
    return "ids_sha256" not in shard or sha256_file(ids) == shard["ids_sha256"]


def _reusable_shards(
    folder: Path, key: dict[str, Any], block: range, own: Path, overwrite: bool
) -> dict[int, dict[str, Any]]:
    """Intact shards of ``block`` listed by any manifest in ``folder`` made with ``key``.

    A manifest this run replaces (``manifest.json`` and its own part) made with other settings is refused unless
    ``overwrite``; other workers' parts are theirs to replace, and the merge checks them.
    """
    worker = own.name != MANIFEST
    sources = [folder / MANIFEST, *sorted(p for p in folder.glob("manifest.part-*-of-*.json") if p != own)]
    sources = [own, *sources] if worker else sources
    done: dict[int, dict[str, Any]] = {}
    for path in sources:
        manifest = _read_manifest(path)
        if manifest is None:
            continue
        old_key = _key_of(manifest)
        if old_key != key:
            if path == own or path.name == MANIFEST:
                if not overwrite:
                    raise EmbedkitError(
                        f"holds embeddings made with other settings (differs in: {_differences(key, old_key)}); "
                        "pass overwrite (--overwrite) or choose another folder",
                        path=path,
                    )
                if not worker:  # a single process owns the folder: nothing of the old run may survive
                    for old in [*folder.glob("shard-*.npy"), *folder.glob("shard-*.docid")]:
                        old.unlink(missing_ok=True)
                    done.clear()
                path.unlink(missing_ok=True)
            continue
        for shard in manifest["shards"]:
            if shard["index"] in block and shard["index"] not in done and _shard_is_intact(folder, shard):
                done[shard["index"]] = shard
    return done


def _remove_temporaries(folder: Path, block: range, own: Path) -> None:
    """Leftovers of a killed write; a worker removes only its own, since other workers may be writing theirs."""
    if own.name == MANIFEST:
        stale = list(folder.glob(".*.tmp"))
    else:
        names = [own.name, *(f"shard-{i:05d}.{ext}" for i in block for ext in ("npy", "docid"))]
        stale = [path for name in names for path in folder.glob(f".{name}.*.tmp")]
    for path in stale:
        path.unlink(missing_ok=True)


def encode_to_folder(
    model: EmbeddingModel,
    corpus: Any,
    folder: str | Path,
    shard_size: int = 10_000,
    overwrite: bool = False,
    show_progress: bool | None = None,
    shard_id: int = 0,
    num_shards: int = 1,
    merge: bool = True,
    corpus_sha256: str | None = None,
) -> EmbeddingsFolder:
    """Encode ``corpus`` into ``folder``, reusing every intact shard encoded earlier with the same settings.

    With ``num_shards > 1`` this process is worker ``shard_id``: it encodes only its block of the global shards
    (see :func:`shard_block`) and records them in its part manifest, so any scheduler can run the workers
    anywhere that sees the folder. With ``merge``, the worker that completes the last part also writes
    ``manifest.json`` (:func:`merge_encoded_parts`); the result is then the whole folder (``complete``), otherwise
    this worker's part. ``corpus_sha256`` is the corpus's ``corpus_fingerprint`` when the caller has it already.
    """
    check_worker(shard_id, num_shards)
    if shard_size < 1:
        raise EmbedkitError(f"--shard-size must be at least 1, not {shard_size}")
    if len(corpus) == 0:
        raise EmbedkitError("the corpus is empty")
    folder = Path(folder)
    check_embeddings_folder(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = {
        "settings": model.settings,
        "corpus": {
            "sha256": corpus_sha256 or corpus_fingerprint(corpus),
            "documents": len(corpus),
            "doc_text": DOC_TEXT_RULE,
        },
        "shard_size": shard_size,
    }
    total = (len(corpus) + shard_size - 1) // shard_size
    worker = num_shards > 1
    block = shard_block(total, shard_id, num_shards) if worker else range(total)
    own = folder / (part_name(shard_id, num_shards) if worker else MANIFEST)
    with output_lock(own):  # a second process encoding the same part waits, then finds the work done
        _remove_temporaries(folder, block, own)
        done = _reusable_shards(folder, key, block, own, overwrite)

        manifest: dict[str, Any] = {
            "format": FORMAT,
            **key,
            "dim": model.dim,
            "dtype": "float32",
            "num_shards": total,
            "count": 0,
            "complete": False,
            "shards": [],
            "library_versions": library_versions(),
        }
        if worker:
            manifest["worker"] = {"shard_id": shard_id, "num_shards": num_shards, "shards": [block.start, block.stop]}
        else:
            manifest["workers"] = 1

        def record() -> None:
            manifest["shards"] = [done[i] for i in sorted(done)]
            manifest["count"] = sum(s["count"] for s in manifest["shards"])
            manifest["complete"] = len(done) == len(block)
            write_json(own, manifest)

        if worker:  # at once: a part left complete by an earlier run must not invite a merge while this one redoes it
            record()
        encoded = 0
        block_docs = min(len(corpus), block.stop * shard_size) - block.start * shard_size if block else 0
        show = len(corpus) >= 1000 if show_progress is None else show_progress
        desc = f"Encoding corpus (worker {shard_id}/{num_shards})" if worker else "Encoding corpus"
        with tqdm(total=block_docs, desc=desc, unit="doc", disable=not show) as bar:
            for index in block:
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
                        "ids_sha256": sha256_file(folder / f"{name}.docid"),
                    }
                    encoded += 1
                record()
        if worker and merge and _parts_ready(folder, key, num_shards):
            merged = merge_encoded_parts(folder, num_shards=num_shards)
            return EmbeddingsFolder(path=folder, manifest=merged.manifest, encoded_shards=encoded)
        return EmbeddingsFolder(path=folder, manifest=manifest, encoded_shards=encoded)


def _parts_ready(folder: Path, key: dict[str, Any], num_shards: int) -> bool:
    """Every part is complete, made with ``key`` and its shard files exist; a stale part of an earlier run is not
    ready (its worker will redo it), so an early finisher never fails on a part that is about to be replaced."""
    for shard_id in range(num_shards):
        manifest = _read_manifest(folder / part_name(shard_id, num_shards))
        if manifest is None or not manifest.get("complete") or _key_of(manifest) != key:
            return False
        if not all((folder / shard["embeddings"]).is_file() for shard in manifest["shards"]):
            return False
    return True


def pending_parts(folder: str | Path, num_shards: int) -> list[int]:
    """Workers whose part is missing or incomplete."""
    pending = []
    for shard_id in range(num_shards):
        manifest = _read_manifest(Path(folder) / part_name(shard_id, num_shards))
        if manifest is None or not manifest.get("complete"):
            pending.append(shard_id)
    return pending


def merge_encoded_parts(folder: str | Path, num_shards: int | None = None) -> EmbeddingsFolder:
    """Write ``manifest.json`` from the part manifests of ``num_shards`` workers (default: the one count present).

    Every part must be complete and made with the same settings, corpus and shard size, and every global shard must
    be present and unchanged (sha256), so the merged folder is exactly what a single process would have written.
    Merging again is harmless: the result is the same file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise EmbedkitError("no such embeddings folder", path=folder)
    if num_shards is None:
        counts = sorted({int(m[2]) for p in folder.iterdir() if (m := PART_PATTERN.fullmatch(p.name))})
        if not counts:
            raise EmbedkitError(
                "no part manifests (manifest.part-*-of-*.json) to merge; encode with --shard-id/--num-shards first",
                path=folder,
            )
        if len(counts) > 1:
            raise EmbedkitError(
                f"holds parts of runs with different --num-shards ({', '.join(map(str, counts))}); "
                "pass --num-shards to choose one",
                path=folder,
            )
        num_shards = counts[0]
    check_worker(0, num_shards)

    parts: list[tuple[Path, dict[str, Any]]] = []
    for shard_id in range(num_shards):
        path = folder / part_name(shard_id, num_shards)
        manifest = _read_manifest(path)
        if manifest is None:
            raise EmbedkitError(f"missing: worker --shard-id {shard_id} of {num_shards} has not run", path=path)
        parts.append((path, manifest))
    first_path, first = parts[0]
    key = _key_of(first)
    for shard_id, (path, manifest) in enumerate(parts):
        if _key_of(manifest) != key:
            raise EmbedkitError(
                f"made with other settings than {first_path.name} (differs in: {_differences(key, _key_of(manifest))})"
                f"; rerun worker --shard-id {shard_id} with the same settings",
                path=path,
            )
        expected = {"shard_id": shard_id, "num_shards": num_shards}
        if {name: manifest.get("worker", {}).get(name) for name in expected} != expected:
            raise EmbedkitError(f"does not record worker {shard_id} of {num_shards}", path=path, field="worker")
        if not manifest.get("complete"):
            start, stop = manifest["worker"]["shards"]
            raise EmbedkitError(
                f"incomplete ({len(manifest['shards'])} of {stop - start} shards); "
                f"rerun worker --shard-id {shard_id} to finish it",
                path=path,
            )

    shards: dict[int, dict[str, Any]] = {}
    for _, manifest in parts:
        shards.update((shard["index"], shard) for shard in manifest["shards"])
    documents, shard_size, total = key["corpus"]["documents"], key["shard_size"], first["num_shards"]
    for index in range(total):
        shard = shards.get(index)
        owner = next(i for i in range(num_shards) if index in shard_block(total, i, num_shards))
        if shard is None:
            raise EmbedkitError(
                f"no part lists global shard {index}; rerun worker --shard-id {owner}",
                path=folder / f"shard-{index:05d}.npy",
            )
        expected_count = min(documents, (index + 1) * shard_size) - index * shard_size
        if shard["count"] != expected_count or not _shard_is_intact(folder, shard):
            raise EmbedkitError(
                f"missing or changed since worker {owner} encoded it (sha256 or count differs from its part "
                f"manifest); rerun worker --shard-id {owner} to re-encode it",
                path=folder / shard["embeddings"],
            )

    ordered = [shards[index] for index in range(total)]
    versions = [manifest.get("library_versions") for _, manifest in parts]
    merged: dict[str, Any] = {
        "format": FORMAT,
        **key,
        "dim": first["dim"],
        "dtype": first["dtype"],
        "num_shards": total,
        "count": sum(shard["count"] for shard in ordered),
        "complete": True,
        "shards": ordered,
        "library_versions": versions[0],
        "workers": num_shards,
    }
    if any(v != versions[0] for v in versions):  # worth knowing if the embeddings ever look inconsistent
        merged["library_versions_by_worker"] = versions
    with output_lock(folder / MANIFEST):
        write_json(folder / MANIFEST, merged)
    return EmbeddingsFolder(path=folder, manifest=merged)
