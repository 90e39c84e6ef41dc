"""Several workers, one embeddings folder: each writes its part manifest, a merge writes ``manifest.json``.

Worker ``i`` of ``n`` encodes block ``i`` of the global shard files (``layout.shard_block``); the merge checks every
part and every shard file (count and sha256), so the merged folder is exactly what a single process would have
written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedkit.encode.folder import EmbeddingsFolder, differences, key_of, read_manifest, shard_is_intact
from embedkit.encode.layout import FORMAT, MANIFEST, PART_PATTERN, check_worker, part_name, shard_block
from embedkit.errors import EmbedkitError
from embedkit.outputs import output_lock
from embedkit.storage import write_json


def parts_ready(folder: Path, key: dict[str, Any], num_workers: int) -> bool:
    """Every part is complete, made with ``key`` and its shard files exist; a stale part of an earlier run is not
    ready (its worker will redo it), so an early finisher never fails on a part that is about to be replaced."""
    for worker_id in range(num_workers):
        manifest = read_manifest(folder / part_name(worker_id, num_workers))
        if manifest is None or not manifest.get("complete") or key_of(manifest) != key:
            return False
        if not all((folder / shard["embeddings"]).is_file() for shard in manifest["shards"]):
            return False
    return True


def pending_parts(folder: str | Path, num_workers: int) -> list[int]:
    """Workers whose part is missing or incomplete."""
    pending = []
    for worker_id in range(num_workers):
        manifest = read_manifest(Path(folder) / part_name(worker_id, num_workers))
        if manifest is None or not manifest.get("complete"):
            pending.append(worker_id)
    return pending


def merge_encoded_parts(folder: str | Path, num_workers: int | None = None) -> EmbeddingsFolder:
    """Write ``manifest.json`` from the part manifests of ``num_workers`` workers (default: the one count present).

    Every part must be complete and made with the same settings, corpus and shard size, and every global shard must
    be present and unchanged (sha256), so the merged folder is exactly what a single process would have written.
    Merging again is harmless: the result is the same file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise EmbedkitError("no such embeddings folder", path=folder)
    if num_workers is None:
        counts = sorted({int(m[2]) for p in folder.iterdir() if (m := PART_PATTERN.fullmatch(p.name))})
        if not counts:
            raise EmbedkitError(
                "no part manifests (manifest.part-*-of-*.json) to merge; encode with --worker-id/--num-workers first",
                path=folder,
            )
        if len(counts) > 1:
            raise EmbedkitError(
                f"holds parts of runs with different --num-workers ({', '.join(map(str, counts))}); "
                "pass --num-workers to choose one",
                path=folder,
            )
        num_workers = counts[0]
    check_worker(0, num_workers)

    parts: list[tuple[Path, dict[str, Any]]] = []
    for worker_id in range(num_workers):
        path = folder / part_name(worker_id, num_workers)
        manifest = read_manifest(path)
        if manifest is None:
            raise EmbedkitError(f"missing: worker --worker-id {worker_id} of {num_workers} has not run", path=path)
        parts.append((path, manifest))
    first_path, first = parts[0]
    key = key_of(first)
    for worker_id, (path, manifest) in enumerate(parts):
        if key_of(manifest) != key:
            raise EmbedkitError(
                f"made with other settings than {first_path.name} (differs in: {differences(key, key_of(manifest))})"
                f"; rerun worker --worker-id {worker_id} with the same settings",
                path=path,
            )
        expected = {"worker_id": worker_id, "num_workers": num_workers}
        if {name: manifest.get("worker", {}).get(name) for name in expected} != expected:
            raise EmbedkitError(f"does not record worker {worker_id} of {num_workers}", path=path, field="worker")
        if not manifest.get("complete"):
            start, stop = manifest["worker"]["shards"]
            raise EmbedkitError(
                f"incomplete ({len(manifest['shards'])} of {stop - start} shards); "
                f"rerun worker --worker-id {worker_id} to finish it",
                path=path,
            )

    shards: dict[int, dict[str, Any]] = {}
    for _, manifest in parts:
        shards.update((shard["index"], shard) for shard in manifest["shards"])
    documents, shard_size, total = key["corpus"]["documents"], key["shard_size"], first["num_shards"]
    for index in range(total):
        shard = shards.get(index)
        owner = next(i for i in range(num_workers) if index in shard_block(total, i, num_workers))
        if shard is None:
            raise EmbedkitError(
                f"no part lists global shard {index}; rerun worker --worker-id {owner}",
                path=folder / f"shard-{index:05d}.npy",
            )
        expected_count = min(documents, (index + 1) * shard_size) - index * shard_size
        if shard.get("documents", shard["count"]) != expected_count or not shard_is_intact(folder, shard):
            raise EmbedkitError(
                f"missing or changed since worker {owner} encoded it (sha256 or count differs from its part "
                f"manifest); rerun worker --worker-id {owner} to re-encode it",
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
        "workers": num_workers,
    }
    if "documents" in first:  # chunk rows: how many documents they cut
        merged["documents"] = sum(shard["documents"] for shard in ordered)
    if any(v != versions[0] for v in versions):  # worth knowing if the embeddings ever look inconsistent
        merged["library_versions_by_worker"] = versions
    with output_lock(folder / MANIFEST):
        write_json(folder / MANIFEST, merged)
    return EmbeddingsFolder(path=folder, manifest=merged)
