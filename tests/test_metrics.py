"""Metrics equal BEIR's EvaluateRetrieval and pytrec_eval on the same real run; the default model's SciFact score."""

from __future__ import annotations

import pytest
import pytrec_eval
from beir.retrieval.evaluation import EvaluateRetrieval

from embedkit import compute_metrics, read_run
from embedkit.evaluation.metrics import METRIC_NAMES


def test_default_model_scores_the_published_scifact_figure(scifact_report):
    """Acceptance 1's number, from the library call: nDCG@10 0.6451 published."""
    ndcg = scifact_report["metrics"]["ndcg_at_10"]
    print(f"SciFact test nDCG@10 = {ndcg:.4f}")
    assert 0.643 <= ndcg <= 0.647
    assert set(scifact_report["metrics"]) == set(METRIC_NAMES)
    assert scifact_report["queries_evaluated"] == 300


@pytest.fixture(scope="module")
def run_and_qrels(default_model, scifact, scifact_embeddings):
    from embedkit import Index, dense_search

    index = Index.build(scifact_embeddings.embeddings(), scifact_embeddings.ids())
    run = dense_search(default_model, index, scifact.split_queries("test"), k=1000)
    return run, scifact.qrels("test")


def test_metrics_equal_beir_evaluate(run_and_qrels):
    """Acceptance: equal to BEIR's EvaluateRetrieval.evaluate (which rounds to 5 places) and to raw pytrec_eval."""
    run, qrels = run_and_qrels
    ours, per_query = compute_metrics(qrels, run)
    ndcg, _map, recall, precision = EvaluateRetrieval.evaluate(
        qrels, run, [1, 3, 5, 10, 100, 1000], ignore_identical_ids=False
    )
    for k in (1, 3, 5, 10, 100):
        assert ours[f"ndcg_at_{k}"] == pytest.approx(ndcg[f"NDCG@{k}"], abs=5e-6)
    assert ours["map_at_100"] == pytest.approx(_map["MAP@100"], abs=5e-6)
    for k in (10, 100, 1000):
        assert ours[f"recall_at_{k}"] == pytest.approx(recall[f"Recall@{k}"], abs=5e-6)
    assert ours["precision_at_10"] == pytest.approx(precision["P@10"], abs=5e-6)
    mrr = EvaluateRetrieval.evaluate_custom(qrels, run, [10], metric="mrr")
    assert ours["mrr_at_10"] == pytest.approx(mrr["MRR@10"], abs=5e-6)

    raw = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "map_cut.100", "recall.100"}).evaluate(run)
    for ours_name, trec_name in (
        ("ndcg_at_10", "ndcg_cut_10"),
        ("map_at_100", "map_cut_100"),
        ("recall_at_100", "recall_100"),
    ):
        expected = sum(q[trec_name] for q in raw.values()) / len(raw)
        assert ours[ours_name] == pytest.approx(expected, abs=1e-9)
        for query_id, row in per_query.items():
            assert row[ours_name] == pytest.approx(raw[query_id][trec_name], abs=1e-12)


def test_run_file_round_trips_exactly(run_and_qrels, tmp_path):
    from embedkit import write_run

    run, qrels = run_and_qrels
    write_run(tmp_path / "run.trec", run)
    assert read_run(tmp_path / "run.trec") == run
    assert compute_metrics(qrels, read_run(tmp_path / "run.trec"))[0] == compute_metrics(qrels, run)[0]


def test_mrr_breaks_ties_like_trec_eval():
    qrels = {"q": {"a": 1}}
    tied = {"q": {"a": 1.0, "b": 1.0, "c": 0.5}}
    means, _ = compute_metrics(qrels, tied)
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(tied)["q"]["recip_rank"]
    assert means["mrr_at_10"] == rr == 0.5
