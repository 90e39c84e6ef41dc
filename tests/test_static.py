"""``embedkit distill-static``: the default model distilled with model2vec, loaded by ``load_model`` like any model,
encoding exactly as sentence-transformers does and retrieving far better than chance on a SciFact cut."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli

pytest.importorskip("model2vec", reason="the static extra (pip install 'embedkit[static]') is not installed")

DIMS = 64


def embedkit(*args: object) -> subprocess.CompletedProcess:
    return run_cli(args)


@pytest.fixture(scope="module")
def static_model(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("static") / "minilm-static"
    done = embedkit("distill-static", "-o", str(folder), "--pca-dims", str(DIMS))
    assert done.returncode == 0, done.stderr
    assert f"static model ({DIMS} dimensions) written to {folder}" in done.stdout
    return folder


def test_load_model_encodes_the_static_folder_as_sentence_transformers_does(static_model):
    from sentence_transformers import SentenceTransformer

    from embedkit import load_model

    model = load_model(static_model, device="cpu")
    assert model.dim == DIMS and model.max_length is None and model.pooling == "mean" and model.normalize
    record = json.loads((static_model / "embedkit_static.json").read_text())
    assert record["format"] == "embedkit.static/1" and record["settings"]["pca_dims"] == DIMS
    assert record["teacher"]["weights_sha256"] and "model2vec" in record["library_versions"]
    texts = ["Vitamin D and bone density", "a", "The quick brown fox jumps over the lazy dog. " * 80, "p53 " * 3]
    ours = model.encode(texts)  # embedkit's length-sorted token-budget batches (the long text alone in its batch)
    reference = SentenceTransformer(str(static_model), device="cpu").encode(texts, batch_size=2)
    assert np.allclose(ours, reference, atol=1e-6)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert load_model(static_model, device="cpu", dtype="bfloat16").backend == "torch"  # nothing to export


def test_static_model_retrieves_on_a_scifact_cut(static_model, scifact_subset, tmp_path):
    from embedkit import evaluate, load_dataset, load_model

    data = load_dataset(scifact_subset)
    report = evaluate(load_model(static_model, device="cpu"), data, "test", cache_dir=tmp_path / "cache")
    ndcg = report["metrics"]["ndcg_at_10"]
    # 20 queries over 300 documents, each with 1-2 relevant: a random ranking scores about 0.02
    assert ndcg > 0.3, report["metrics"]
    assert report["model"]["max_length"] is None and report["model"]["dim"] == DIMS


def test_distill_static_refuses_a_user_folder_and_bad_flags(tmp_path):
    mine = tmp_path / "thesis"
    mine.mkdir()
    (mine / "chapter1.tex").write_text("mine")
    done = embedkit("distill-static", "-o", str(mine))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and (mine / "chapter1.tex").read_text() == "mine"
    done = embedkit("distill-static", "-o", str(tmp_path / "s"), "--pca-dims", "1")
    assert done.returncode == 2 and "--pca-dims" in done.stderr and not (tmp_path / "s").exists()
