"""Indexes that fit: streamed builds, on-disk merged IVF and partitioned search over the real SciFact embeddings,
re-split into several embedding shard files, each checked against the in-memory index over all vectors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import faiss
import numpy as np
import pytest

from embedkit import EmbeddingsFolder, EmbedkitError, Index, PartitionedIndex, ShardedIndex, load_index
from embedkit.cli import main
from embedkit.data.trec import read_run
from embedkit.index.faiss_helpers import BuildSettings
from embedkit.index.ondisk import build_ondisk
from embedkit.index.partitioned import build_partitioned
from embedkit.storage import save_npy, sha256_file, write_json, write_lines

SEED, TRAIN_SIZE, NPROBE = 7, 3000, 8  # 3,000 of 5,183 vectors: the training sample is drawn across both shards


def _reshard(source: EmbeddingsFolder, folder: Path, shard_size: int) -> EmbeddingsFolder:
    """The same embeddings as an embeddings folder of ``shard_size``-vector shards."""
    vectors, ids = source.embeddings(), source.ids()
    shards = []
    for number, start in enumerate(range(0, len(ids), shard_size)):
        name = f"shard-{number:05d}"
        save_npy(folder / f"{name}.npy", vectors[start : start + shard_size])
        write_lines(folder / f"{name}.docid", ids[start : start + shard_size])
        count = len(ids[start : start + shard_size])
        shards.append(
            {"index": number, "embeddings": f"{name}.npy", "ids": f"{name}.docid", "count": count}
            | {"sha256": sha256_file(folder / f"{name}.npy")}
        )
    manifest = {**source.manifest, "shard_size": shard_size, "num_shards": len(shards), "shards": shards}
    write_json(folder / "manifest.json", manifest)
    return EmbeddingsFolder.open(folder)


@pytest.fixture(scope="module")
def folder(scifact_embeddings, tmp_path_factory) -> EmbeddingsFolder:
    """All 5,183 SciFact vectors in 2 embedding shards (2,600 + 2,583)."""
    return _reshard(scifact_embeddings, tmp_path_factory.mktemp("emb-2-shards"), 2600)


@pytest.fixture(scope="module")
def vectors(scifact_embeddings):
    return scifact_embeddings.embeddings(), scifact_embeddings.ids()


@pytest.fixture(scope="module")
def queries(default_model, scifact) -> dict[str, str]:
    return scifact.split_queries("test")


@pytest.fixture(scope="module")
def query_vectors(default_model, queries):
    return default_model.encode_queries(list(queries.values()))


def _same(a: tuple[np.ndarray, list[list[str]]], b: tuple[np.ndarray, list[list[str]]]) -> None:
    assert a[1] == b[1]
    assert np.array_equal(a[0], b[0])


@pytest.mark.parametrize("factory", ["IVF64,Flat", "PCA128,IVF64,SQ8", "IVF64,PQ16x4np"])
def test_ondisk_ivf_equals_in_memory(folder, vectors, query_vectors, factory, tmp_path, monkeypatch):
    """Acceptance: the on-disk IVF merged from 2 shards gives the in-memory index's ids and scores for all 300
    SciFact test queries (nprobe 8), also after save, move and load from another cwd."""
    embeddings, ids = vectors
    # Added in the blocks' batches: a pre-transform (PCA) rounds a row differently in another BLAS batch (~3e-7).
    memory = Index.build(
        embeddings, ids, factory, train_size=TRAIN_SIZE, seed=SEED, use_gpu=False, nprobe=NPROBE, add_batch_size=2600
    )
    settings = BuildSettings(factory, train_size=TRAIN_SIZE, seed=SEED, use_gpu=False, nprobe=NPROBE)
    disk = build_ondisk(folder, tmp_path / "idx", settings)
    quantizers = [faiss.extract_index_ivf(i.faiss_index).quantizer for i in (memory, disk)]
    assert np.array_equal(*(q.reconstruct_n(0, q.ntotal) for q in quantizers))  # one trained quantizer
    expected = memory.search(query_vectors, 10)
    _same(expected, disk.search(query_vectors, 10, nprobe=NPROBE))

    assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == ["docid", "index", "index.ivfdata", "meta.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["idx"]  # blocks and temporary folders are gone
    meta = json.loads((tmp_path / "idx" / "meta.json").read_text())
    assert meta["on_disk"] and meta["blocks"] == 2 and meta["trained_on"] == TRAIN_SIZE and meta["seed"] == SEED
    assert meta["model"] == folder.settings and meta["search_params"] == {"nprobe": NPROBE}

    disk.save(tmp_path / "idx", overwrite=True)  # over the folder it lies in: the mapped lists survive the swap
    disk.save(tmp_path / "copy")
    _same(expected, disk.search(query_vectors, 10))
    os.rename(tmp_path / "copy", tmp_path / "moved")
    monkeypatch.chdir(tmp_path / "idx")
    for path in (tmp_path / "moved", Path(".")):
        _same(expected, Index.load(path).search(query_vectors, 10))


def test_on_disk_lists_leave_stdout_alone(folder, query_vectors, tmp_path, capfd):
    """Building, moving, opening and searching an on-disk index prints nothing and never points this process's
    stdout elsewhere, as a second thread sampling descriptor 1 throughout sees (FAISS prints as it merges and as it
    maps lists from a moved folder; that used to be silenced by pointing descriptor 1 at /dev/null meanwhile)."""
    import threading

    seen, stop = set(), threading.Event()

    def sample() -> None:
        while not stop.is_set():
            seen.add(os.readlink("/proc/self/fd/1"))

    before = os.readlink("/proc/self/fd/1")
    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        settings = BuildSettings("IVF16,Flat", train_size=TRAIN_SIZE, seed=SEED, use_gpu=False, nprobe=4)
        expected = build_ondisk(folder, tmp_path / "idx", settings).search(query_vectors, 10)
        os.rename(tmp_path / "idx", tmp_path / "moved")
        for _ in range(20):
            _same(expected, Index.load(tmp_path / "moved").search(query_vectors, 10))
    finally:
        stop.set()
        sampler.join()
    assert seen == {before}
    assert capfd.readouterr().out == ""


def test_streamed_build_equals_in_memory_build(folder, vectors):
    """Sample drawn across the shards and shard-by-shard adding give the very same FAISS index as Index.build."""
    embeddings, ids = vectors
    for factory in ("IVF64,Flat", "Flat"):
        memory = Index.build(embeddings, ids, factory, train_size=TRAIN_SIZE, seed=SEED, use_gpu=False)
        settings = BuildSettings(factory, train_size=TRAIN_SIZE, seed=SEED, use_gpu=False, add_batch_size=1000)
        streamed = Index.from_vectors(folder, settings)
        assert streamed.ids == ids
        assert np.array_equal(faiss.serialize_index(memory.faiss_index), faiss.serialize_index(streamed.faiss_index))
        assert streamed.meta["trained_on"] == memory.meta["trained_on"]


@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_partitioned_flat_equals_one_flat(folder, vectors, query_vectors, metric, tmp_path):
    """3 index partitions over rows that cross the shard files' boundary: the same top-10 as one Flat index."""
    embeddings, ids = vectors
    expected = Index.build(embeddings, ids, "Flat", metric, use_gpu=False).search(query_vectors, 10)
    path = build_partitioned(folder, tmp_path / "sharded", 3, BuildSettings("Flat", metric, use_gpu=False))
    sharded = load_index(path)
    assert isinstance(sharded, PartitionedIndex) and len(sharded) == len(ids) and sharded.ids == ids
    assert ShardedIndex is PartitionedIndex  # the old name still works
    assert json.loads((path / "meta.json").read_text())["counts"] == [1727, 1728, 1728]
    _same(expected, sharded.search(query_vectors, 10))
    _same(expected, PartitionedIndex.load(sharded.save(tmp_path / "again")).search(query_vectors, 10))
    with pytest.raises(EmbedkitError, match=r"open it with embedkit\.index\.load_index"):
        Index.load(path)


def _cli(capfd, *args: object) -> tuple[int, str, str]:
    """The embedkit command in this process (no second torch import): exit status, stdout, stderr (file level,
    so what FAISS prints from C shows too)."""
    capfd.readouterr()
    try:
        main([str(arg) for arg in args])
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    out, err = capfd.readouterr()
    return code, out, err


def test_cli_on_disk_and_sharded_round_trip(folder, vectors, queries, default_model, tmp_path, capfd):
    """`embedkit index --on-disk` / `--num-partitions` (and its old name) then `embedkit search`: exact runs."""
    from embedkit.search.dense import dense_search

    picked = dict(list(queries.items())[:20])
    (tmp_path / "q.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in picked.items()))
    exact = dense_search(default_model, Index.build(*vectors, use_gpu=False), picked, k=10)
    builds = {
        "ondisk": ("--factory", "IVF64,Flat", "--on-disk", "--nprobe", 64),  # all 64 lists: exact
        "partitioned": ("--num-partitions", 3),
        "sharded": ("--num-shards", 3),  # the old name of --num-partitions
    }
    for name, options in builds.items():
        code, stdout, stderr = _cli(
            capfd, "index", "-e", folder.path, "-o", tmp_path / name, "--train-size", TRAIN_SIZE, *options
        )
        assert code == 0, stderr
        assert stdout.strip().startswith("5183 vectors indexed"), stdout  # and nothing that FAISS printed
        out = tmp_path / f"{name}.trec"
        code, stdout, stderr = _cli(
            capfd, "search", "-i", tmp_path / name, "--queries", tmp_path / "q.jsonl", "-k", 10, "-o", out
        )
        assert code == 0, stderr
        assert stdout.strip() == f"20 queries searched; run written to {out}"
        run = read_run(out)
        assert {q: list(hits) for q, hits in run.items()} == {q: list(hits) for q, hits in exact.items()}
        for q, hits in run.items():
            assert np.allclose(list(hits.values()), list(exact[q].values()), atol=1e-4)


def test_cli_on_disk_needs_an_ivf_factory(folder, tmp_path, capfd):
    code, _, stderr = _cli(capfd, "index", "-e", folder.path, "-o", tmp_path / "i", "--factory", "HNSW32", "--on-disk")
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "an on-disk index needs an IVF factory" in lines[0] and "HNSW32" in lines[0]
    assert not (tmp_path / "i").exists()


def test_bad_shard_counts_and_folders(folder, tmp_path):
    with pytest.raises(EmbedkitError, match="must be between 1 and the 5183 vectors, not 0"):
        build_partitioned(folder, tmp_path / "s", 0, BuildSettings())
    with pytest.raises(EmbedkitError, match="an on-disk index needs an IVF factory"):
        build_partitioned(folder, tmp_path / "s", 2, BuildSettings("Flat"), on_disk=True)
    (tmp_path / "evil").mkdir()
    write_json(tmp_path / "evil" / "meta.json", {"format": "embedkit.sharded-index/1", "shards": ["../x"]})
    with pytest.raises(EmbedkitError, match=r"partition '\.\./x' is not a subfolder name"):
        load_index(tmp_path / "evil")
