"""Streaming a corpus to shards: resume after a real SIGKILL, cache hits, and refusing mixed settings."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ForkedCli

from embedkit import EmbeddingsFolder, EmbedkitError, encode_to_folder, load_model


def _encode(corpus: Path, output: Path, *extra: str) -> ForkedCli:
    return ForkedCli(["encode", "--corpus", corpus, "--output", output, "--shard-size", "10", *extra])


def _complete_shards(folder: Path) -> int:
    try:
        return len(json.loads((folder / "manifest.json").read_text())["shards"])
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


@pytest.fixture
def small_corpus(scifact_subset, tmp_path) -> Path:
    """60 real SciFact documents: 6 shards of 10, so a run can be stopped part-way."""
    lines = (scifact_subset / "corpus.jsonl").read_text().splitlines(keepends=True)[:60]
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize(
    "kind",  # sentence chunks resume the same way as late ones (the same shard code): make test-slow
    ["dense", "sparse", "multivector", pytest.param("sentence-chunks", marks=pytest.mark.slow), "late-chunks"],
)
def test_killed_encode_resumes_to_identical_embeddings(kind, small_corpus, splade_folder, colbert_folder, tmp_path):
    """Acceptance: SIGKILL part-way (while a shard is being encoded), rerun, bit-identical shards to an
    uninterrupted run, dense, sparse, multi-vector or chunked (chunk rows and their spans); a third run encodes
    nothing."""
    corpus = small_corpus
    model = {
        "dense": [],
        "sparse": ["--model", str(splade_folder), "--max-length", "32", "--max-active-dims", "64"],
        "multivector": ["--model", str(colbert_folder), "--max-length", "32"],
        "sentence-chunks": ["--chunking", "sentence", "--chunk-size", "48", "--chunk-overlap", "16"],
        "late-chunks": ["--chunking", "late", "--chunk-size", "48", "--max-length", "128"],
    }[kind]
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    assert _encode(corpus, whole, *model).wait() == 0

    victim = _encode(corpus, resumed, *model)
    deadline = time.time() + 300
    while _complete_shards(resumed) < 2 and time.time() < deadline and victim.poll() is None:
        time.sleep(0.05)
    assert victim.poll() is None, "the encode finished before it could be killed"
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    done_before = _complete_shards(resumed)
    manifest = json.loads((resumed / "manifest.json").read_text())
    assert 2 <= done_before < manifest["num_shards"] and manifest["complete"] is False

    second = _encode(corpus, resumed, *model)
    out, err = second.communicate()
    assert second.returncode == 0, err
    assert f"({manifest['num_shards'] - done_before} shards encoded now)" in out

    a, b = EmbeddingsFolder.open(whole), EmbeddingsFolder.open(resumed)
    assert b.complete and a.ids() == b.ids() and (a.sparse, a.multivector) == (kind == "sparse", kind == "multivector")
    assert [s["sha256"] for s in a.manifest["shards"]] == [s["sha256"] for s in b.manifest["shards"]]
    if kind.endswith("chunks"):  # every chunk row, its id and its characters
        assert a.manifest["shards"] == b.manifest["shards"] and a.manifest["documents"] == 60
        assert a.manifest["count"] > 60 and a.spans().tolist() == b.spans().tolist()
    assert sorted(p.name for p in whole.iterdir()) == sorted(p.name for p in resumed.iterdir())

    third = _encode(corpus, resumed, *model)
    out, _ = third.communicate()
    assert third.returncode == 0 and "(0 shards encoded now)" in out


def test_manifest_records_settings_ids_and_checksums(scifact, default_model, tmp_path):
    docs = [scifact.corpus[i] for i in range(40)]
    folder = encode_to_folder(default_model, docs, tmp_path / "e", shard_size=16)
    manifest = folder.manifest
    assert manifest["settings"] == default_model.settings and manifest["count"] == 40
    assert [s["count"] for s in manifest["shards"]] == [16, 16, 8]
    assert all(len(s["sha256"]) == 64 for s in manifest["shards"])
    assert folder.ids() == [d["_id"] for d in docs]
    assert np.allclose(folder.embeddings(), default_model.encode_corpus(docs), atol=1e-5)
    assert encode_to_folder(default_model, docs, tmp_path / "e", shard_size=16).encoded_shards == 0


def test_other_settings_are_refused_unless_overwritten(scifact, default_model, tmp_path):
    docs = [scifact.corpus[i] for i in range(8)]
    encode_to_folder(default_model, docs, tmp_path / "e", shard_size=4)
    short = load_model(max_length=32, device="cpu")
    with pytest.raises(EmbedkitError, match=r"other settings \(differs in: settings.max_length\)"):
        encode_to_folder(short, docs, tmp_path / "e", shard_size=4)
    redone = encode_to_folder(short, docs, tmp_path / "e", shard_size=4, overwrite=True)
    assert redone.encoded_shards == 2 and redone.settings["max_length"] == 32


def test_corrupted_shard_is_re_encoded(scifact, default_model, tmp_path):
    docs = [scifact.corpus[i] for i in range(8)]
    first = encode_to_folder(default_model, docs, tmp_path / "e", shard_size=4)
    np.save(tmp_path / "e" / "shard-00001.npy", np.zeros((4, 384), dtype=np.float32))
    second = encode_to_folder(default_model, docs, tmp_path / "e", shard_size=4)
    assert second.encoded_shards == 1
    assert np.array_equal(first.embeddings(), second.embeddings())


def test_the_cache_key_ignores_the_dataset_folder_and_is_the_corpus_content(scifact_subset, default_model, tmp_path):
    """An identical corpus in another folder is a cache hit; manifests and reports carry one corpus hash."""
    import shutil

    from embedkit import evaluate, load_dataset

    shutil.copytree(scifact_subset, tmp_path / "renamed-copy")
    cache = tmp_path / "cache"
    first = evaluate(default_model, load_dataset(scifact_subset), cache_dir=cache)
    second = evaluate(default_model, load_dataset(tmp_path / "renamed-copy"), cache_dir=cache)
    assert first["embeddings_cache"]["encoded_shards"] == 1 and second["embeddings_cache"]["encoded_shards"] == 0
    assert first["embeddings_cache"]["path"] == second["embeddings_cache"]["path"]
    manifest = json.loads((Path(first["embeddings_cache"]["path"]) / "manifest.json").read_text())
    assert manifest["corpus"]["sha256"] == first["dataset"]["corpus_sha256"] == second["dataset"]["corpus_sha256"]
    assert manifest["settings"] == default_model.settings


def test_two_encodes_into_one_folder_at_once(small_corpus, tmp_path):
    """The second waits for the first's lock: identical settings find the work done; other settings are refused and
    the first run's embeddings survive."""
    corpus = small_corpus
    output = tmp_path / "emb"
    same = [_encode(corpus, output) for _ in range(2)]
    results = [process.communicate(timeout=600) for process in same]
    assert [process.returncode for process in same] == [0, 0], results
    encoded = sorted(re.search(r"\((\d+) shards encoded now\)", out)[1] for out, _ in results)
    assert encoded == ["0", "6"]
    before = {p.name: p.read_bytes() for p in output.iterdir()}
    other = _encode(corpus, output, "--max-length", "64")
    first_again = _encode(corpus, output)
    _, err = other.communicate(timeout=600)
    assert other.returncode == 2 and "embeddings made with other settings" in err and "Traceback" not in err
    assert first_again.communicate(timeout=600)[1].count("Traceback") == 0 and first_again.returncode == 0
    assert {p.name: p.read_bytes() for p in output.iterdir()} == before
