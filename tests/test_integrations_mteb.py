"""MTEB and embedkit agree: ``mteb.evaluate`` on local BEIR folders scores as ``embedkit evaluate``.

Most tests here are adapter tests: MTEB runs embedkit's encoder, index and data loader (``--harness mteb``).
``test_mteb_alone_scores_like_embedkit`` is the independent check: MTEB loads the data with its own loader, encodes
with its own sentence-transformers wrapper and searches with its own exact search.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import TEST_CACHE
from test_cli import _one_line_error, embedkit

from embedkit import EmbedkitError, EvaluateOptions, evaluate
from embedkit.integrations.mteb import IndexBackend, MtebEncoder, beir_task, evaluate_mteb


def test_adapters_satisfy_mteb_protocols(default_model):
    from mteb.models.models_protocols import EncoderProtocol, SearchProtocol
    from mteb.models.search_wrappers import SearchEncoderWrapper

    encoder = MtebEncoder(default_model)
    assert isinstance(encoder, EncoderProtocol)
    assert isinstance(SearchEncoderWrapper(encoder, index_backend=IndexBackend("HNSW32")), SearchProtocol)
    meta = encoder.mteb_model_meta
    assert meta.name == "sentence-transformers/all-MiniLM-L6-v2" and meta.embed_dim == 384


@pytest.mark.slow  # the whole of SciFact through MTEB (82 s in `make test`); the subset cases below keep the harness
def test_mteb_on_scifact_matches_embedkit(default_model, scifact, scifact_report, tmp_path):
    """Acceptance: the same nDCG@10 to 1e-4; MTEB's result JSON is written beside embedkit's report."""
    options = EvaluateOptions(harness="mteb")
    report = evaluate(default_model, scifact, "test", output=tmp_path, cache_dir=TEST_CACHE, options=options)
    mteb = report["mteb"]
    assert mteb["task"] == "SciFact" and mteb["ndcg_at_10"] == pytest.approx(report["metrics"]["ndcg_at_10"], abs=1e-4)
    assert mteb["recall_at_100"] == pytest.approx(report["metrics"]["recall_at_100"], abs=1e-4)
    folder = Path(report["folder"])
    assert folder.parent == tmp_path
    saved = json.loads((folder / "mteb" / "SciFact.json").read_text())
    assert saved["task_name"] == "SciFact"
    assert saved["scores"]["test"][0]["ndcg_at_10"] == pytest.approx(mteb["ndcg_at_10"])
    assert json.loads((folder / "report.json").read_text())["mteb"] == mteb


def test_mteb_alone_scores_like_embedkit(default_model, scifact_subset, tmp_path):
    """No embedkit part inside MTEB: its loader (offline, from a Hub-layout folder), its model wrapper, its search."""
    import mteb
    from sentence_transformers import SentenceTransformer

    from embedkit import load_dataset
    from embedkit.integrations.mteb import task_loaded_by_mteb
    from embedkit.models.reference import default_model_path

    data = load_dataset(scifact_subset)
    task = task_loaded_by_mteb(data, "test", "SciFact", tmp_path)
    corpus = task.dataset["default"]["test"]["corpus"]
    assert len(corpus) == 150 and set(corpus["id"]) == set(data.corpus["_id"])
    model = SentenceTransformer(str(default_model_path()), device="cpu")
    result = mteb.evaluate(model, tasks=[task], cache=None, show_progress_bar=False)
    theirs = result.task_results[0].scores["test"][0]["ndcg_at_10"]
    ours = evaluate(default_model, data, "test", cache_dir=TEST_CACHE)["metrics"]["ndcg_at_10"]
    assert theirs == pytest.approx(ours, abs=1e-4)


def test_mteb_encodes_documents_itself(default_model, scifact_subset):
    """Adapter test without embedkit's cache: MTEB's corpus dataloader feeds embedkit's encoder."""
    from embedkit import load_dataset

    data = load_dataset(scifact_subset)
    ours = evaluate(default_model, data, "test", cache_dir=TEST_CACHE)
    theirs, _ = evaluate_mteb(default_model, data, "test", factory="Flat", task_name="SciFact")
    assert theirs["ndcg_at_10"] == pytest.approx(ours["metrics"]["ndcg_at_10"], abs=1e-4)


class _Cache:
    def __init__(self, settings, ids, vectors):
        self.settings, self._ids, self._vectors = settings, ids, vectors

    def ids(self):
        return self._ids

    def embeddings(self):
        return self._vectors


def test_a_stale_corpus_cache_is_refused(default_model):
    texts = ["Aspirin lowers fever.", "Insulin regulates blood sugar."]
    wrong = np.random.default_rng(0).normal(size=(2, 384)).astype(np.float32)
    encoder = MtebEncoder(default_model, _Cache(default_model.settings, ["a", "b"], wrong))
    with pytest.raises(EmbedkitError, match="cached embeddings disagree"):
        encoder._from_cache(["a", "b"], texts)
    with pytest.raises(EmbedkitError, match="other model settings"):
        MtebEncoder(default_model, _Cache({**default_model.settings, "max_length": 128}, ["a"], wrong[:1]))


def test_unknown_dataset_has_no_task(scifact_subset):
    from embedkit import load_dataset

    with pytest.raises(EmbedkitError, match="no MTEB task known for dataset"):
        beir_task(load_dataset(scifact_subset))


def test_cli_harness_mteb(scifact_subset, tmp_path):
    args = ["evaluate", "-d", scifact_subset, "-o", tmp_path, "--cache-dir", TEST_CACHE, "--harness", "mteb"]
    result = embedkit(*args, "--mteb-task", "SciFact")
    assert result.returncode == 0, result.stderr
    (folder,) = tmp_path.iterdir()
    assert (folder / "mteb" / "SciFact.json").is_file()
    assert "MTEB SciFact nDCG@10 = " in result.stdout
    _one_line_error(embedkit(*args, "--retriever", "bm25"), "the mteb harness runs dense retrieval")


def test_the_declared_similarity_is_the_one_computed(tiny_bert):
    """MTEB's model meta says what ``similarity`` computes, which is what the index's metric ranks by."""
    from embedkit import load_model

    raw = load_model(tiny_bert, pooling="mean")  # a plain folder: not normalised
    a, b = raw.encode(["aspirin", "fever"]), raw.encode(["insulin"])
    for metric, name, expected in (
        ("ip", "dot", a @ b.T),
        ("l2", "euclidean", -np.linalg.norm(a[:, None] - b[None], axis=2)),
    ):
        encoder = MtebEncoder(raw, metric=metric)
        assert encoder.similarity_fn_name == name == encoder.mteb_model_meta.similarity_fn_name
        assert np.allclose(np.asarray(encoder.similarity(a, b)), expected, atol=1e-4)
    assert MtebEncoder(load_model(tiny_bert, pooling="mean", normalize=True)).similarity_fn_name == "cosine"
