"""``embedkit evaluate --retriever bm25|dense|hybrid`` through the command line."""

from __future__ import annotations

import json

from conftest import TEST_CACHE
from test_cli import _one_line_error, embedkit


def test_help_lists_the_retrievers():
    result = embedkit("evaluate", "--help")
    assert result.returncode == 0
    for option in ("--retriever", "--bm25-backend", "--bm25-k1", "--bm25-b", "--fusion", "--fusion-weights"):
        assert option in result.stdout


def test_bm25_evaluation_needs_no_model(scifact_subset, tmp_path):
    result = embedkit(
        "evaluate", "-d", scifact_subset, "-o", tmp_path, "--retriever", "bm25", "--bm25-k1", "1.2", "--bm25-b", "0.75"
    )
    assert result.returncode == 0, result.stderr
    (folder,) = tmp_path.glob(f"{scifact_subset.name}__bm25__bm25s__test__*")
    report = json.loads((folder / "report.json").read_text())
    assert report["model"] is None
    assert report["retriever"]["type"] == "bm25"
    assert (report["retriever"]["k1"], report["retriever"]["b"]) == (1.2, 0.75)
    assert f"nDCG@10 = {report['metrics']['ndcg_at_10']:.4f}" in result.stdout


def test_hybrid_interpolation_records_its_weights(scifact_subset, tmp_path):
    result = embedkit(
        "evaluate",
        "-d",
        scifact_subset,
        "-o",
        tmp_path,
        "--cache-dir",
        TEST_CACHE,
        "--retriever",
        "hybrid",
        "--fusion",
        "interpolation",
        "--fusion-weights",
        "0.7,0.3",
        "--fusion-depth",
        "100",
    )
    assert result.returncode == 0, result.stderr
    (folder,) = tmp_path.iterdir()
    report = json.loads((folder / "report.json").read_text())
    fusion = report["retriever"]["fusion"]
    assert fusion == {"method": "interpolation", "weights": [0.7, 0.3], "depth": 100, "rrf_k": 60}
    assert set(report["component_metrics"]) == {"dense", "bm25"}
    assert "Metrics of the bm25 run alone" in (folder / "report.md").read_text()


def test_malformed_weights_are_one_line(scifact_subset, tmp_path):
    result = embedkit(
        "evaluate", "-d", scifact_subset, "-o", tmp_path, "--retriever", "hybrid", "--fusion-weights", "0.7;0.3"
    )
    _one_line_error(result, "--fusion-weights", "0.7;0.3")


def test_unknown_retriever_is_one_line(scifact_subset, tmp_path):
    result = embedkit("evaluate", "-d", scifact_subset, "-o", tmp_path, "--retriever", "sparkle")
    _one_line_error(
        result, "option '--retriever': unknown value 'sparkle' (choose from dense, bm25, splade, colbert, hybrid)"
    )
