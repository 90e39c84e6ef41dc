"""``encode --executor ray`` on a real local Ray cluster: the folder equals the single-process one, even when an
encoding actor is killed mid-run (a real SIGKILL), and no shard committed before the kill is written again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import write_jsonl

pytest.importorskip("ray", reason="the ray extra (pip install 'embedkit[ray]') is not installed")

SHARD_SIZE = 10
# One torch thread everywhere: the single-process reference and each actor then run the very same kernels.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_AUTH_MODE": "disabled"}


def embedkit(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "embedkit", *args], capture_output=True, text=True, env=ENV, **kwargs)


def ray_encode(corpus: Path, output: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "embedkit",
        "encode",
        "--corpus",
        str(corpus),
        "-o",
        str(output),
        "--shard-size",
        str(SHARD_SIZE),
        "--executor",
        "ray",
        "--num-workers",
        "2",
        "--cpus-per-worker",
        "0.5",
    ]


def first_documents(tmp_path_factory, scifact, count: int) -> Path:
    folder = tmp_path_factory.mktemp(f"ray-corpus-{count}")
    return write_jsonl(folder / "corpus.jsonl", list(scifact.corpus.select(range(count))))


def single_process(tmp_path_factory, corpus: Path) -> Path:
    """The folder a plain ``encode`` (one process, no Ray) writes for ``corpus``."""
    folder = tmp_path_factory.mktemp("ray-reference") / "emb"
    done = embedkit("encode", "--corpus", str(corpus), "-o", str(folder), "--shard-size", str(SHARD_SIZE))
    assert done.returncode == 0, done.stderr
    return folder


@pytest.fixture(scope="module")
def short_corpus(tmp_path_factory, scifact) -> Path:
    """The first 60 SciFact documents: 6 shard files of 10, 3 per actor."""
    return first_documents(tmp_path_factory, scifact, 60)


@pytest.fixture(scope="module")
def slice_corpus(tmp_path_factory, scifact) -> Path:
    """The first 300 SciFact documents: 30 shard files of 10, enough to kill an actor part-way."""
    return first_documents(tmp_path_factory, scifact, 300)


def assert_same_folder(folder: Path, reference: Path) -> None:
    assert (folder / "manifest.json").read_bytes() == (reference / "manifest.json").read_bytes()
    names = sorted(p.name for p in reference.iterdir())
    assert sorted(p.name for p in folder.iterdir()) == names
    for name in names:
        if name.endswith(".npy"):
            assert np.array_equal(np.load(folder / name), np.load(reference / name)), name
        else:
            assert (folder / name).read_bytes() == (reference / name).read_bytes(), name


@pytest.mark.slow  # a local Ray cluster start: make test stays under 25 minutes; make test-slow runs every Ray test
def test_ray_executor_equals_one_process_on_20_documents(tmp_path_factory, tmp_path, scifact):
    """``make test``'s real Ray encode: a local cluster, two actors, one shard each, the single-process folder."""
    corpus = first_documents(tmp_path_factory, scifact, 20)
    reference = single_process(tmp_path_factory, corpus)
    done = subprocess.run(ray_encode(corpus, tmp_path / "emb"), capture_output=True, text=True, env=ENV)
    assert done.returncode == 0, done.stderr
    assert "20 documents in 2 shard files" in done.stdout
    assert_same_folder(tmp_path / "emb", reference)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sparse", "multivector"])
def test_ray_executor_encodes_sparse_and_multivector_models(tmp_path_factory, tmp_path, scifact, kind, request):
    """A SPLADE or ColBERT model's shards through Ray actors (handed texts, encoded by the library's own route) are
    the single-process folder's, byte for byte."""
    folder = request.getfixturevalue("splade_folder" if kind == "sparse" else "colbert_folder")
    model = ["-m", str(folder), "--max-length", "32"] + (["--max-active-dims", "64"] if kind == "sparse" else [])
    corpus = first_documents(tmp_path_factory, scifact, 20)
    plain = ["encode", "--corpus", str(corpus), "--shard-size", str(SHARD_SIZE), *model]
    done = embedkit(*plain, "-o", str(tmp_path / "reference"))
    assert done.returncode == 0, done.stderr
    done = subprocess.run([*ray_encode(corpus, tmp_path / "emb"), *model], capture_output=True, text=True, env=ENV)
    assert done.returncode == 0, done.stderr
    assert_same_folder(tmp_path / "emb", tmp_path / "reference")


# the clean-run twin of the killed-actor test below, on 60 documents, with a resumed second run
@pytest.mark.slow
def test_ray_executor_writes_the_single_process_folder(tmp_path_factory, tmp_path, short_corpus):
    reference = single_process(tmp_path_factory, short_corpus)
    done = subprocess.run(ray_encode(short_corpus, tmp_path / "emb"), capture_output=True, text=True, env=ENV)
    assert done.returncode == 0, done.stderr
    assert "60 documents in 6 shard files" in done.stdout
    assert_same_folder(tmp_path / "emb", reference)
    again = subprocess.run(ray_encode(short_corpus, tmp_path / "emb"), capture_output=True, text=True, env=ENV)
    assert again.returncode == 0 and "(0 shards encoded now)" in again.stdout, again.stdout + again.stderr


def encoding_actors() -> list[int]:
    """Pids of the live Ray actors running embedkit's ShardEncoder (their process title names the class)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"ShardEncoder" in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@pytest.mark.slow  # 220 s of a 44-minute `make test` on an AVX2 CPU (2026-12-03); `make test-slow` runs it
def test_killed_actor_is_replaced_and_no_shard_is_written_twice(tmp_path_factory, tmp_path, slice_corpus):
    reference = single_process(tmp_path_factory, slice_corpus)
    output = tmp_path / "emb"
    process = subprocess.Popen(
        ray_encode(slice_corpus, output), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV
    )
    try:
        deadline = time.monotonic() + 300
        while len(list(output.glob("shard-*.npy"))) < 2:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "no shard was committed in 300 s"
            time.sleep(0.05)
        actors = encoding_actors()
        assert actors, "no ShardEncoder actor process found"
        os.kill(actors[0], signal.SIGKILL)
        committed = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in output.glob("shard-*.npy")}
        assert len(committed) < 30, "the encode finished before the kill; the test proves nothing"
        _, err = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert not Path(f"/proc/{actors[0]}").exists()
    assert_same_folder(output, reference)
    for name, (inode, mtime) in committed.items():  # committed before the kill: never rewritten after it
        stat = (output / name).stat()
        assert (stat.st_ino, stat.st_mtime_ns) == (inode, mtime), f"{name} was written twice"
    again = subprocess.run(ray_encode(slice_corpus, output), capture_output=True, text=True, env=ENV)
    assert again.returncode == 0 and "(0 shards encoded now)" in again.stdout, again.stdout + again.stderr


def test_ray_flags_are_refused_without_the_ray_executor(tmp_path, short_corpus):
    done = embedkit("encode", "--corpus", str(short_corpus), "-o", str(tmp_path / "e"), "--gpus-per-worker", "1")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--gpus-per-worker does nothing without --executor ray" in done.stderr
    done = embedkit(
        "encode",
        "--corpus",
        str(short_corpus),
        "-o",
        str(tmp_path / "e"),
        "--executor",
        "ray",
        "--worker-id",
        "0",
        "--num-workers",
        "2",
    )
    assert done.returncode == 2 and "--worker-id" in done.stderr
    done = embedkit(
        "encode", "--corpus", str(short_corpus), "-o", str(tmp_path / "e"), "--executor", "ray", "--num-workers", "0"
    )
    assert done.returncode == 2 and "--num-workers" in done.stderr and done.stderr.count("\n") == 1
    done = embedkit("encode", "--corpus", str(short_corpus), "-o", str(tmp_path / "e"), "--executor", "spark")
    assert done.returncode == 2 and "--executor" in done.stderr
    assert not (tmp_path / "e").exists()


@pytest.mark.slow  # mine hands the executor to the same encode_to_folder the tests above run
def test_mine_encodes_its_corpus_through_ray(tmp_path, scifact_subset):
    """``mine --executor ray`` fills the embeddings cache with the folder a local mine writes, so it mines the same."""
    mined = {}
    for executor in ("local", "ray"):
        cache = tmp_path / f"cache-{executor}"
        extra = ["--num-workers", "1", "--cpus-per-worker", "1"] if executor == "ray" else []
        done = embedkit(
            "mine",
            "-d",
            str(scifact_subset),
            "--split",
            "test",
            "-o",
            str(tmp_path / f"{executor}.jsonl"),
            "--cache-dir",
            str(cache),
            "--executor",
            executor,
            *extra,
        )
        assert done.returncode == 0, done.stderr
        (folder,) = cache.glob("corpus-*")
        mined[executor] = ((folder / "manifest.json").read_bytes(), (tmp_path / f"{executor}.jsonl").read_bytes())
    assert mined["ray"] == mined["local"]
