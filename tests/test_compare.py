"""``embedkit compare`` on real SciFact runs: paired tests agree with scipy, counts and extremes with numpy."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from scipy import stats
from test_cli import _one_line_error, embedkit

from embedkit import EmbedkitError
from embedkit.evaluation.compare import compare_runs, load_run_folder
from embedkit.evaluation.significance import paired_test


def _scores(folder, metric="ndcg_at_10"):
    per_query = json.loads((folder / "per_query.json").read_text())
    return per_query, {q: row[metric] for q, row in per_query.items()}


def test_cli_prints_p_values_of_scipy_ttest_rel(scifact_reports, tmp_path):
    dense, bm25, hybrid = (scifact_reports[name] for name in ("dense", "bm25", "hybrid"))
    result = embedkit(
        "compare", bm25, dense, hybrid, "--metric", "ndcg_at_10", "--metric", "recall_at_100", "-o", tmp_path
    )
    assert result.returncode == 0, result.stderr
    saved = json.loads((tmp_path / "compare.json").read_text())
    assert (tmp_path / "compare.md").read_text() in result.stdout
    for folder, comparison in zip((dense, hybrid), saved["comparisons"]):
        for metric in ("ndcg_at_10", "recall_at_100"):
            _, a = _scores(bm25, metric)
            _, b = _scores(folder, metric)
            queries = sorted(a)
            expected = stats.ttest_rel([b[q] for q in queries], [a[q] for q in queries])
            test = comparison["tests"][metric]
            assert test["t_p_value"] == pytest.approx(expected.pvalue, rel=1e-12)
            assert test["t_statistic"] == pytest.approx(expected.statistic, rel=1e-12)
            # The printed row carries the same p-value (3 significant digits).
            row = next(line for line in result.stdout.splitlines() if line.startswith(f"| {folder.name} | {metric} |"))
            printed = float(row.split("|")[4])
            assert printed == pytest.approx(expected.pvalue, rel=5e-3)
            delta = np.array([b[q] - a[q] for q in queries])
            assert (test["wins"], test["ties"], test["losses"]) == (
                int((delta > 1e-9).sum()),
                int((np.abs(delta) <= 1e-9).sum()),
                int((delta < -1e-9).sum()),
            )
            assert test["bootstrap_ci_low"] < delta.mean() < test["bootstrap_ci_high"]
    # The hybrid improves on BM25 significantly by both tests.
    hybrid_test = saved["comparisons"][1]["tests"]["ndcg_at_10"]
    assert hybrid_test["delta"] > 0 and hybrid_test["t_p_value"] < 0.05 and hybrid_test["randomization_p_value"] < 0.05
    assert re.search(r"\| \S+ \| ndcg_at_10 \| [+-]\d\.\d{4} \| \d\.\d{3}e[+-]\d\d \|", result.stdout)


def test_biggest_gains_and_losses_are_the_extremes(scifact_reports):
    result = compare_runs([scifact_reports["dense"], scifact_reports["bm25"]], top=3)
    comparison = result["comparisons"][0]
    deltas = comparison["per_query_delta"]
    gains = [row["query_id"] for row in comparison["biggest_gains"]]
    losses = [row["query_id"] for row in comparison["biggest_losses"]]
    assert [deltas[q] for q in gains] == sorted(deltas.values(), reverse=True)[:3]
    assert [deltas[q] for q in losses] == sorted(deltas.values())[:3]
    assert result["queries_compared"] == 300 and result["queries_not_shared"] == 0
    assert result["runs"][0]["means"]["ndcg_at_10"] == pytest.approx(
        load_run_folder(scifact_reports["dense"]).report["metrics"]["ndcg_at_10"]
    )


def test_randomization_test_detects_a_shift_and_not_noise():
    rng = np.random.default_rng(7)
    a = rng.random(200)
    shifted = paired_test(a, a + 0.05 + rng.normal(0, 0.05, 200))
    noise = paired_test(a, a + rng.normal(0, 0.05, 200) * rng.choice([-1, 1], 200))
    assert shifted.randomization_p_value < 0.001 and shifted.bootstrap_ci_low > 0
    assert noise.randomization_p_value > 0.05 and noise.bootstrap_ci_low < 0 < noise.bootstrap_ci_high
    # With many queries the two tests agree closely (both ~ normal).
    assert noise.randomization_p_value == pytest.approx(noise.t_p_value, abs=0.05)


def test_identical_runs_have_no_t_test():
    same = paired_test(np.array([0.1, 0.5, 0.9]), np.array([0.1, 0.5, 0.9]))
    assert same.t_p_value is None and same.randomization_p_value == 1.0 and same.ties == 3


def test_runs_on_different_datasets_are_refused(scifact_reports, tmp_path):
    import shutil

    other = tmp_path / "other"
    shutil.copytree(scifact_reports["bm25"], other)
    report = json.loads((other / "report.json").read_text())
    report["dataset"]["split"] = "train"
    (other / "report.json").write_text(json.dumps(report))
    with pytest.raises(EmbedkitError, match="dataset split 'train' differs"):
        compare_runs([scifact_reports["dense"], other])


def test_cli_errors_are_one_line(scifact_reports, tmp_path):
    _one_line_error(embedkit("compare", scifact_reports["dense"]), "at least two report folders")
    result = embedkit("compare", scifact_reports["dense"], tmp_path)
    _one_line_error(result, f"{tmp_path / 'report.json'}: not found")


def test_help_shows_an_example():
    result = embedkit("compare", "--help")
    assert result.returncode == 0 and "Example: embedkit compare" in result.stdout


def test_reports_on_other_judgements_are_compared_with_a_note(scifact_subset, tmp_path):
    import shutil

    from embedkit import evaluate

    other = tmp_path / "fewer-judgements"
    shutil.copytree(scifact_subset, other)
    qrels = (other / "qrels" / "test.tsv").read_text().splitlines()
    (other / "qrels" / "test.tsv").write_text("\n".join(qrels[:-3]) + "\n")
    folders = [
        evaluate(None, data, output=tmp_path / "r", retriever="bm25")["folder"] for data in (scifact_subset, other)
    ]
    assert folders[0] != folders[1]  # other judgements, another settings hash
    result = compare_runs(folders, resamples=200)
    assert len(result["warnings"]) == 1 and "scored on other judgements" in result["warnings"][0]
    out = embedkit("compare", *folders, "--resamples", "200")
    assert out.returncode == 0 and "**Note:**" in out.stdout and "other judgements" in out.stdout
