"""Encoding split across workers (separate processes, a real torchrun) equals one process, and merging refuses
anything that is not exactly what one process would have written."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import write_jsonl

from embedkit import EmbeddingsFolder, EmbedkitError, encode_to_folder, load_model
from embedkit.cli import main
from embedkit.encode import merge_encoded_parts

CLI = [sys.executable, "-c", "from embedkit.cli import main; main()"]
# One thread in every process (torchrun's default for its ranks), so all runs do the same float arithmetic.
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
SETTINGS = ("--shard-size", "16", "--max-length", "64", "--device", "cpu")


def _encode(corpus: Path, output: Path, *extra: str) -> subprocess.Popen:
    args = [*CLI, "encode", "--corpus", str(corpus), "--output", str(output), *SETTINGS, *extra]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


def _finish(process: subprocess.Popen) -> str:
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-3000:]
    return out


def _assert_same_folder(reference: Path, other: Path, workers: int) -> None:
    a, b = EmbeddingsFolder.open(reference), EmbeddingsFolder.open(other)
    assert b.complete and b.manifest["workers"] == workers
    assert a.ids() == b.ids()
    assert np.array_equal(a.embeddings(), b.embeddings())  # bitwise, not approximately
    assert {k: v for k, v in a.manifest.items() if k != "workers"} == {
        k: v for k, v in b.manifest.items() if k != "workers"
    }


def _cli_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run the command in this process; it must fail as a user error: exit 2 and one line on stderr."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    stderr = capsys.readouterr().err
    assert exit_info.value.code == 2 and stderr.count("\n") == 1, stderr
    return stderr


@pytest.fixture(scope="module")
def corpus(scifact, tmp_path_factory) -> Path:
    """120 real SciFact documents: 8 shards of 16 (the last one 8)."""
    folder = tmp_path_factory.mktemp("dist-corpus")
    return write_jsonl(folder / "corpus.jsonl", [scifact.corpus[i] for i in range(120)])


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory) -> Path:
    """The same corpus encoded by one process."""
    folder = tmp_path_factory.mktemp("dist-reference") / "emb"
    _finish(_encode(corpus, folder))
    return folder


def test_two_worker_processes_equal_one_process(corpus, reference, tmp_path):
    """Acceptance: two workers run concurrently (by the flags' old names, kept as aliases); the last to finish
    merges; bitwise equal."""
    out = tmp_path / "emb"
    workers = [_encode(corpus, out, "--shard-id", str(i), "--num-shards", "2") for i in range(2)]
    outputs = [_finish(worker) for worker in workers]
    assert any("merged from 2 workers" in line for line in outputs), outputs
    assert sorted(p.name for p in out.glob("manifest.part-*")) == [
        "manifest.part-00000-of-00002.json",
        "manifest.part-00001-of-00002.json",
    ]
    _assert_same_folder(reference, out, workers=2)


def test_torchrun_ranks_encode_their_blocks_and_rank_0_merges(corpus, reference, tmp_path):
    """Acceptance: `torchrun --nproc_per_node=2 -m embedkit.cli encode` (gloo, CPU) equals one process."""
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
    out = tmp_path / "emb"
    args = [torchrun, "--standalone", "--nproc_per_node=2", "-m", "embedkit.cli", "encode", "--corpus", str(corpus)]
    result = subprocess.run(
        [*args, "--output", str(out), *SETTINGS], capture_output=True, text=True, timeout=600, env=ENV
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "120 documents in 8 shard files" in result.stdout and "merged from 2 workers" in result.stdout
    _assert_same_folder(reference, out, workers=2)


def test_merge_refuses_missing_mismatched_or_changed_parts(scifact, default_model, tmp_path, capsys):
    docs = [scifact.corpus[i] for i in range(24)]  # 3 shards of 8: worker 0 takes shard 0, worker 1 shards 1-2
    out = tmp_path / "emb"
    part = encode_to_folder(default_model, docs, out, shard_size=8, worker_id=0, num_workers=2)
    assert (
        not part.complete
        and part.manifest["worker"]["shards"] == [0, 1]
        and part.ids() == [docs[i]["_id"] for i in range(8)]
    )
    with pytest.raises(EmbedkitError, match=r"not merged yet"):
        EmbeddingsFolder.open(out)
    with pytest.raises(EmbedkitError, match=r"manifest\.part-00001-of-00002\.json: missing: worker --worker-id 1"):
        merge_encoded_parts(out)
    stderr = _cli_error(capsys, "encode", "--merge", "-o", str(out))
    assert stderr.startswith("embedkit: error:") and "manifest.part-00001-of-00002.json: missing" in stderr

    # Worker 1 with another max_length is refused before it writes a shard (the folder records worker 0's settings);
    # forced with overwrite it does not merge, and an explicit merge names the odd part and field.
    short = load_model(max_length=32, device="cpu")
    with pytest.raises(
        EmbedkitError, match=r"other settings \(differs in: settings\.max_length\); .*256 there, 32 here"
    ):
        encode_to_folder(short, docs, out, shard_size=8, worker_id=1, num_workers=2)
    assert not encode_to_folder(short, docs, out, shard_size=8, worker_id=1, num_workers=2, overwrite=True).complete
    mismatch = r"part-00001-of-00002\.json: made with other settings than .*part-00000.* settings\.max_length"
    with pytest.raises(EmbedkitError, match=mismatch):
        merge_encoded_parts(out, num_workers=2)
    with pytest.raises(EmbedkitError, match=r"other settings \(differs in: settings\.max_length\)"):
        encode_to_folder(default_model, docs, out, shard_size=8, worker_id=1, num_workers=2)

    # Redone with the right settings, worker 1 completes the set and merges: one process's folder, bit for bit.
    merged = encode_to_folder(default_model, docs, out, shard_size=8, worker_id=1, num_workers=2, overwrite=True)
    single = encode_to_folder(default_model, docs, tmp_path / "single", shard_size=8)
    assert merged.complete and merged.encoded_shards == 2 and merged.manifest["shards"] == single.manifest["shards"]
    assert np.array_equal(EmbeddingsFolder.open(out).embeddings(), single.embeddings())

    # Resume per worker: a lost shard of worker 1's block is all it re-encodes, and it merges again.
    (out / "shard-00002.npy").unlink()
    redone = encode_to_folder(default_model, docs, out, shard_size=8, worker_id=1, num_workers=2)
    assert redone.complete and redone.encoded_shards == 1 and redone.manifest == EmbeddingsFolder.open(out).manifest
    assert np.array_equal(redone.embeddings(), single.embeddings())

    np.save(out / "shard-00002.npy", np.zeros((8, 384), dtype=np.float32))
    with pytest.raises(EmbedkitError, match=r"shard-00002\.npy: missing or changed since worker 1 encoded it"):
        merge_encoded_parts(out)


def test_worker_arguments_are_checked_before_loading_anything(tmp_path, capsys):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "d1", "text": "x"}])
    base = ("encode", "--corpus", str(corpus), "-o", str(tmp_path / "e"))
    assert "option '--worker-id': must be in 0..1" in _cli_error(
        capsys, *base, "--worker-id", "2", "--num-workers", "2"
    )
    assert "give --worker-id and --num-workers together" in _cli_error(capsys, *base, "--worker-id", "0")
    assert "--shard-id is the old name of --worker-id" in _cli_error(
        capsys, *base, "--worker-id", "0", "--shard-id", "0"
    )
    assert not (tmp_path / "e").exists()
