"""Encoding a corpus into an embeddings folder, shard file by shard file, resumable.

The manifest is rewritten (atomically) after each shard file, so a killed run resumes from the last complete one and
a rerun with unchanged settings is a cache hit that encodes nothing. With several workers each writes its block
and its part manifest (``embedkit.encode.workers`` merges them).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from embedkit.data.beir import DOC_TEXT_RULE, corpus_fingerprint
from embedkit.encode.executor import InProcess
from embedkit.encode.folder import (
    EmbeddingsFolder,
    check_claim,
    claim_folder,
    differences,
    key_of,
    read_manifest,
    recorded_key,
    shard_is_intact,
    unclaim_folder,
)
from embedkit.encode.layout import (
    FORMAT,
    MANIFEST,
    PART_PATTERN,
    check_embeddings_folder,
    check_worker,
    part_name,
    shard_block,
)
from embedkit.encode.shards import remove_shard_files
from embedkit.encode.workers import merge_encoded_parts, parts_ready
from embedkit.environment import library_versions
from embedkit.errors import EmbedkitError
from embedkit.outputs import output_lock, replace_folder
from embedkit.storage import write_json
from embedkit.validation import check_number

if TYPE_CHECKING:
    from embedkit.encode.executor import ShardExecutor
    from embedkit.models.embedding_model import EmbeddingModel


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
        manifest = read_manifest(path)
        if manifest is None:
            continue
        old_key = key_of(manifest)
        if old_key != key:
            if path == own or path.name == MANIFEST:
                if not overwrite:
                    raise EmbedkitError(
                        f"holds embeddings made with other settings (differs in: {differences(key, old_key)}); "
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
            if shard["index"] in block and shard["index"] not in done and shard_is_intact(folder, shard):
                done[shard["index"]] = shard
    return done


def _worker_of(name: str) -> tuple[int, int]:
    match = PART_PATTERN.fullmatch(name)
    assert match is not None  # ``own`` is a part name made by ``part_name``
    return int(match[1]), int(match[2])


def _remove_temporaries(folder: Path, block: range, own: Path) -> None:
    """Leftovers of a killed write; a worker removes only its own, since other workers may be writing theirs."""
    if own.name == MANIFEST:
        stale = list(folder.glob(".*.tmp"))
    else:
        names = [own.name, *(f"shard-{i:05d}.{ext}" for i in block for ext in ("npy", "docid", "spans.npy"))]
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
    worker_id: int = 0,
    num_workers: int = 1,
    merge: bool = True,
    corpus_sha256: str | None = None,
    executor: ShardExecutor | None = None,
) -> EmbeddingsFolder:
    """Encode ``corpus`` into ``folder``, reusing every intact shard encoded earlier with the same settings.

    With ``num_workers > 1`` this process is worker ``worker_id``: it encodes only its block of the global shards
    (see :func:`shard_block`) and records them in its part manifest, so any scheduler can run the workers
    anywhere that sees the folder. With ``merge``, the worker that completes the last part also writes
    ``manifest.json`` (:func:`merge_encoded_parts`); the result is then the whole folder (``complete``), otherwise
    this worker's part. ``corpus_sha256`` is the corpus's ``corpus_fingerprint`` when the caller has it already.
    ``executor`` encodes the missing shards elsewhere (``embedkit.encode.ray_executor``); this process still owns the
    folder, its lock and its manifest, so the folder is the same whoever encoded it.
    """
    check_worker(worker_id, num_workers)
    if len(corpus) == 0:
        raise EmbedkitError("the corpus is empty")
    check_number(shard_size, "shard_size", minimum=1)  # past the corpus size it is one shard
    folder = Path(folder)
    check_embeddings_folder(folder)
    created = not folder.exists()
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
    worker = num_workers > 1
    block = shard_block(total, worker_id, num_workers) if worker else range(total)
    own = folder / (part_name(worker_id, num_workers) if worker else MANIFEST)
    if overwrite and not worker and not created and recorded_key(folder) not in (None, key):
        # one writer replacing embeddings of other settings: the new ones are built beside and swapped in whole, so
        # a full disk or a kill leaves the old folder as it was (several workers share the folder: they cannot)
        with replace_folder(folder, "embeddings", overwrite=True) as new:
            built = encode_to_folder(
                model,
                corpus,
                new,
                shard_size,
                False,
                show_progress,
                merge=merge,
                corpus_sha256=key["corpus"]["sha256"],
                executor=executor,
            )
        return EmbeddingsFolder(path=folder, manifest=built.manifest, encoded_shards=built.encoded_shards)
    claimed = False
    try:
        claimed = claim_folder(folder, key, overwrite)  # before any shard: a worker with other settings stops here
        return _encode_block(model, corpus, folder, key, block, own, overwrite, show_progress, executor, merge)
    except BaseException:
        if claimed:
            unclaim_folder(folder, own, created)
        raise


def _encode_block(
    model: EmbeddingModel,
    corpus: Any,
    folder: Path,
    key: dict[str, Any],
    block: range,
    own: Path,
    overwrite: bool,
    show_progress: bool | None,
    executor: ShardExecutor | None,
    merge: bool,
) -> EmbeddingsFolder:
    """The shards of ``block`` this folder lacks, encoded and recorded in ``own`` (a part or ``manifest.json``)."""
    shard_size, total = key["shard_size"], (len(corpus) + key["shard_size"] - 1) // key["shard_size"]
    worker = own.name != MANIFEST
    worker_id, num_workers = _worker_of(own.name) if worker else (0, 1)
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
            manifest["worker"] = {
                "worker_id": worker_id,
                "num_workers": num_workers,
                "shards": [block.start, block.stop],
            }
        else:
            manifest["workers"] = 1

        def record() -> None:
            manifest["shards"] = [done[i] for i in sorted(done)]
            manifest["count"] = sum(s["count"] for s in manifest["shards"])
            if getattr(model, "chunking", None) is not None:  # rows are chunks: how many documents they cut
                manifest["documents"] = sum(s["documents"] for s in manifest["shards"])
            manifest["complete"] = len(done) == len(block)
            write_json(own, manifest)

        if worker:  # at once: a part left complete by an earlier run must not invite a merge while this one redoes it
            record()
        encoded = 0
        block_docs = min(len(corpus), block.stop * shard_size) - block.start * shard_size if block else 0
        show = len(corpus) >= 1000 if show_progress is None else show_progress
        desc = f"Encoding corpus (worker {worker_id}/{num_workers})" if worker else "Encoding corpus"
        with tqdm(total=block_docs, desc=desc, unit="doc", disable=not show) as bar:
            bar.update(sum(shard.get("documents", shard["count"]) for shard in done.values()))
            pending = [index for index in block if index not in done]
            remove_shard_files(folder, pending)
            for entry in (executor or InProcess()).encode_shards(model, corpus, folder, pending, shard_size, bar):
                check_claim(folder, key)
                done[entry["index"]] = entry
                encoded += 1
                record()
            if not pending:
                record()
        if worker and merge and parts_ready(folder, key, num_workers):
            merged = merge_encoded_parts(folder, num_workers=num_workers)
            return EmbeddingsFolder(path=folder, manifest=merged.manifest, encoded_shards=encoded)
        return EmbeddingsFolder(path=folder, manifest=manifest, encoded_shards=encoded)
