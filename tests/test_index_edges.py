"""The index layer trusts nothing: ids, vectors, k and search parameters are checked at the library's entry points,
huge values are clamped or refused (never a hang or a native crash), and ``--rescore`` refuses float vectors other
than those the index was built from (the embeddings folder re-encoded with other settings, same ids and dimension).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli

from embedkit.errors import EmbedkitError
from embedkit.index import Index

N, DIM = 40, 16
VECTORS = np.random.default_rng(0).standard_normal((N, DIM)).astype(np.float32)
IDS = [f"d{i}" for i in range(N)]


@pytest.fixture(scope="module")
def cut(tmp_path_factory, scifact_subset, default_model) -> dict[str, Path]:
    """A SciFact cut, its embeddings, a Flat and an SQ8 index of them, and the queries of the test split."""
    from embedkit import load_dataset
    from embedkit.encode.writer import encode_to_folder

    root = tmp_path_factory.mktemp("index-edges")
    data = load_dataset(scifact_subset)
    emb = encode_to_folder(default_model, data.corpus, root / "emb")
    for name, factory in (("flat", "Flat"), ("sq8", "SQ8"), ("ivf", "IVF4,Flat"), ("hnsw", "HNSW8")):
        built = Index.from_vectors(emb, _settings(factory))
        built.attach_vectors(emb)
        built.save(root / name)
    return {"root": root, "data": scifact_subset, "emb": emb.path}


def _settings(factory: str):
    from embedkit.index import BuildSettings

    return BuildSettings(factory, use_gpu=False)


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (["a\nb", *IDS[1:]], "ids[0]"),
        (["a\tb", *IDS[1:]], "ids[0]"),
        (["a b", *IDS[1:]], "ids[0]"),
        ([*IDS[:-1], "d0"], "duplicate id 'd0'"),
        (list(range(N)), "must be a string, not int"),
        ([*IDS[:-1], ""], "must not be empty"),
        ("d" * N, "must be a list"),
        (IDS[:-1], "40 vectors but 39 document ids"),
    ],
)
def test_build_refuses_bad_ids(ids, message):
    with pytest.raises(EmbedkitError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Index.build(VECTORS, ids, use_gpu=False)


@pytest.mark.parametrize(
    ("embeddings", "message"),
    [
        (np.where(np.arange(N)[:, None] == 3, np.nan, VECTORS), "row 3 holds NaN or infinity"),
        (VECTORS * np.float32(np.inf), "row 0 holds NaN or infinity"),
        (VECTORS.astype(np.float64) * 1e300, "NaN or infinity"),  # overflows float32
        (VECTORS[:, :, None], "must be a 2-d array"),
        (VECTORS[0], "must be a 2-d array"),
        ("vectors", "2-d array of numbers"),
        (VECTORS.astype(str), "2-d array of numbers"),
        (VECTORS[:0], "40 document ids"),
    ],
)
def test_build_refuses_bad_vectors(embeddings, message):
    with pytest.raises(EmbedkitError, match=message):
        Index.build(embeddings, IDS, use_gpu=False)


def test_build_refuses_a_bad_factory_before_faiss():
    with pytest.raises(EmbedkitError, match="HNSW's M must be between 2"):
        Index.build(VECTORS, IDS, "HNSW1", use_gpu=False)


@pytest.fixture(scope="module")
def built() -> dict[str, Index]:
    return {f: Index.build(VECTORS, IDS, f, use_gpu=False) for f in ("Flat", "IVF4,Flat", "HNSW8", "SQ8")}


@pytest.mark.parametrize("k", [0, -3, float("nan"), float("inf"), -float("inf"), 2.5, "5", None, True])
def test_search_refuses_bad_k(built, k):
    with pytest.raises(EmbedkitError, match="field 'k'"):
        built["Flat"].search(VECTORS[:1], k)


def test_search_refuses_nan_and_mis_shaped_queries(built):
    queries = VECTORS[:3].copy()
    queries[1, 0] = np.nan
    with pytest.raises(EmbedkitError, match="field 'queries': row 1 holds NaN"):
        built["Flat"].search(queries, 5)
    with pytest.raises(EmbedkitError, match="query dimension 8"):
        built["Flat"].search(VECTORS[:1, :8], 5)


@pytest.mark.parametrize("factory", ["Flat", "IVF4,Flat", "HNSW8", "SQ8"])
def test_huge_k_and_parameters_are_clamped(built, factory):
    index = built[factory]
    index.attach_vectors(VECTORS)
    extra = {"nprobe": 10**15} if "IVF" in factory else {"ef_search": 10**15} if "HNSW" in factory else {}
    scores, hits = index.search(VECTORS[:2], 10**12, rescore=10**12 if factory == "SQ8" else None, **extra)
    assert scores.shape == (2, N) and sorted(hits[0]) == sorted(IDS) and hits[0][0] == "d0"
    with pytest.raises(EmbedkitError, match="must be at most"):
        index.search(VECTORS[:1], 5, rescore=2**70)


def test_search_params_are_checked_and_clamped(built):
    index = built["IVF4,Flat"]
    index.set_search_params(nprobe=10**12)
    assert index.search_params["nprobe"] == 4  # the number of lists
    for bad in (0, float("nan"), 1.5):
        with pytest.raises(EmbedkitError, match="nprobe"):
            index.set_search_params(nprobe=bad)


def test_library_rescore_refuses_other_vectors(built):
    index = Index.build(VECTORS, IDS, "SQ8", use_gpu=False)
    with pytest.raises(EmbedkitError, match="differ from those the index was built from"):
        index.attach_vectors(VECTORS[::-1].copy())
    index.attach_vectors(VECTORS.copy())  # the same rows, another array: accepted


def _search(cut, tmp_path, index: str, *extra: str):
    args = ["search", "-i", str(cut["root"] / index), "-d", str(cut["data"]), "--split", "test", "-o", "run.trec"]
    return run_cli([*args, *extra], tmp_path, tmp_path)


def test_cli_huge_numbers_are_clamped(cut, tmp_path):
    result = _search(cut, tmp_path, "ivf", "-k", str(10**12), "--nprobe", str(10**15))
    assert result.returncode == 0, result.stderr
    lines = (tmp_path / "run.trec").read_text().splitlines()
    assert len(lines) == 20 * 150  # every document for each of the 20 queries
    result = _search(cut, tmp_path, "hnsw", "-k", "5", "--ef-search", str(10**15), "--overwrite")
    assert result.returncode == 0, result.stderr
    result = _search(cut, tmp_path, "sq8", "-k", "5", "--rescore", str(10**30), "--overwrite")
    assert result.returncode == 2 and "option '--rescore': must be at most" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cli_rescore_refuses_a_re_encoded_folder(cut, tmp_path):
    """The folder re-encoded with other settings (same ids, same dimension): refused, not silently re-ranked."""
    from embedkit import load_dataset, load_model
    from embedkit.encode.writer import encode_to_folder

    emb = shutil.copytree(cut["emb"], tmp_path / "emb")
    index = Index.from_vectors(emb, _settings("SQ8"))
    index.attach_vectors(emb)
    index.save(tmp_path / "idx")
    result = run_cli(
        ["search", "-i", "idx", "-d", str(cut["data"]), "-o", "a.trec", "--rescore", "4"], tmp_path, tmp_path
    )
    assert result.returncode == 0, result.stderr
    shutil.rmtree(emb)
    encode_to_folder(load_model(device="cpu", max_length=16), load_dataset(cut["data"]).corpus, emb)
    result = run_cli(
        ["search", "-i", "idx", "-d", str(cut["data"]), "-o", "b.trec", "--rescore", "4"], tmp_path, tmp_path
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "the embeddings changed since the index was built" in lines[0] and str(emb) in lines[0]
    assert not (tmp_path / "b.trec").exists()
    with pytest.raises(EmbedkitError, match="changed since the index was built"):
        Index.load(tmp_path / "idx", use_gpu=False).search(np.zeros((1, 384), np.float32), 5, rescore=2)


def test_old_index_without_checksums_warns_once(cut, tmp_path, caplog):
    folder = shutil.copytree(cut["root"] / "sq8", tmp_path / "old")
    meta = json.loads((folder / "meta.json").read_text())
    meta["vectors"] = {"path": meta["vectors"]["path"], "count": meta["vectors"]["count"]}  # as written before
    (folder / "meta.json").write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING):
        Index.load(folder, use_gpu=False).search(np.zeros((1, 384), np.float32), 5, rescore=2)
    assert sum("records no checksum" in record.getMessage() for record in caplog.records) == 1
