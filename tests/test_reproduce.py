"""``embedkit reproduce``: the packaged table runs its SciFact rows here and they pass; errors name file and line."""

from __future__ import annotations

import json

import pytest
from conftest import TEST_CACHE
from test_cli import _one_line_error, embedkit
from test_report_html import Dom

from embedkit import EmbedkitError
from embedkit.reproduce import load_conditions


def test_packaged_table_parses():
    conditions, meta = load_conditions()
    ids = [c.id for c in conditions]
    assert {"bm25-flat.scifact", "bm25s.scifact", "all-minilm-l6-v2.scifact"} <= set(ids)
    assert all(c.source in meta["sources"] for c in conditions)
    scifact = next(c for c in conditions if c.id == "bm25-flat.scifact")
    assert scifact.expected == {"ndcg_at_10": 0.6789, "recall_at_100": 0.9253} and scifact.tolerance == 0.001


@pytest.mark.slow  # a whole-dataset check (63 s of `make test` on an AVX2 CPU); the cases below run the runner on a cut
def test_scifact_rows_pass(tmp_path):
    only = ["bm25-flat.scifact", "bm25s.scifact", "all-minilm-l6-v2.scifact", "bm25-flat.nfcorpus"]
    args = [arg for name in only for arg in ("--only", name)]
    result = embedkit("reproduce", *args, "-o", tmp_path, "--cache-dir", TEST_CACHE)
    assert result.returncode == 0, result.stdout + result.stderr
    saved = json.loads((tmp_path / "reproduce.json").read_text())
    rows = {row["id"]: row for row in saved["rows"]}
    assert [rows[name]["status"] for name in only] == ["pass", "pass", "pass", "skipped"]
    assert "not available locally" in rows["bm25-flat.nfcorpus"]["reason"]
    for name in only[:3]:
        report = json.loads(next((tmp_path / name).glob("*/report.json")).read_text())
        for metric, cell in rows[name]["metrics"].items():
            assert cell["measured"] == report["metrics"][metric]
            assert abs(cell["measured"] - cell["expected"]) <= rows[name]["tolerance"]
    assert (
        json.loads(next((tmp_path / "bm25-flat.scifact").glob("*/report.json")).read_text())["retriever"]["backend"]
        == "pyserini"
    )
    assert "3 passed, 0 failed, 1 skipped" in result.stdout
    # The same table is the report page.
    dom = Dom((tmp_path / "report.html").read_text())
    assert dom.title == "embedkit reproductions"
    table = dom.tables["reproductions"]
    assert table[0][:4] == ["condition", "metric", "expected", "measured"]
    row = next(r for r in table if r[:2] == ["bm25-flat.scifact", "ndcg_at_10"])
    assert row[2] == "0.6789" and row[6] == "pass"


def _config(tmp_path, condition: str, sources: str = "src: {title: t, url: u}") -> str:
    path = tmp_path / "conditions.yaml"
    path.write_text(f"tolerance: 0.001\nsources:\n  {sources}\nconditions:\n{condition}")
    return str(path)


def test_a_row_outside_its_tolerance_fails(scifact_subset, tmp_path):
    condition = (
        f"  - id: too-high\n    dataset: {scifact_subset}\n    retriever: bm25\n"
        "    expected: {ndcg_at_10: 0.99}\n    source: src\n"
    )
    result = embedkit("reproduce", "--config", _config(tmp_path, condition), "-o", tmp_path / "out")
    assert result.returncode == 1
    assert "| too-high | ndcg_at_10 | 0.9900 |" in result.stdout and "FAIL" in result.stdout
    assert json.loads((tmp_path / "out" / "reproduce.json").read_text())["rows"][0]["status"] == "fail"


def test_a_model_that_is_not_here_is_skipped(scifact_subset, tmp_path):
    condition = (
        f"  - id: bge\n    dataset: {scifact_subset}\n    retriever: dense\n"
        "    model: {name: BAAI/bge-small-en-v1.5}\n    expected: {ndcg_at_10: 0.5}\n    source: src\n"
    )
    result = embedkit("reproduce", "--config", _config(tmp_path, condition), "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    row = json.loads((tmp_path / "out" / "reproduce.json").read_text())["rows"][0]
    assert row["status"] == "skipped" and "cannot be loaded here" in row["reason"]


@pytest.mark.parametrize(
    ("condition", "fragments"),
    [
        (
            "  - id: a\n    dataset: scifact\n    retriever: bm25\n    expected: {}\n    source: src\n"
            "    colour: red\n",
            [":10: field 'colour': unknown key"],
        ),
        (
            "  - id: a\n    dataset: scifact\n    retriever: bm25\n    expected: {ndcg_at_10: high}\n    source: src\n",
            [":8: field 'expected.ndcg_at_10': expected float"],
        ),
        (
            "  - id: a\n    dataset: scifact\n    retriever: bm25\n    expected: {}\n    source: elsewhere\n",
            [":9: field 'source': unknown source 'elsewhere'"],
        ),
        (
            "  - id: a\n    dataset: scifact\n    retriever: bm25\n    source: src\n",
            [":5: field 'conditions[0].expected': missing"],
        ),
    ],
)
def test_yaml_errors_name_file_line_and_field(tmp_path, condition, fragments):
    path = _config(tmp_path, condition)
    with pytest.raises(EmbedkitError) as caught:
        load_conditions(path)
    for fragment in fragments:
        assert str(caught.value).startswith(path) and fragment in str(caught.value)
    _one_line_error(embedkit("reproduce", "--config", path, "-o", tmp_path / "out"), *fragments)


def test_unknown_only_id_is_one_line(tmp_path):
    _one_line_error(embedkit("reproduce", "--only", "nope", "-o", tmp_path), "no condition with id nope")


def test_list_and_help():
    listed = embedkit("reproduce", "--list")
    assert listed.returncode == 0 and "bm25-flat.scifact: BM25 flat" in listed.stdout
    assert "Example: embedkit reproduce" in embedkit("reproduce", "--help").stdout


def test_a_colbert_row_loads_its_multivector_model(colbert_folder, scifact_subset, tmp_path):
    """A ``colbert`` condition's model is loaded and searched by MaxSim; its measured score is ``evaluate``'s."""
    from embedkit import evaluate, load_model

    condition = (
        f"  - id: colbert\n    dataset: {scifact_subset}\n    retriever: colbert\n"
        f"    model: {{name: '{colbert_folder}'}}\n    expected: {{ndcg_at_10: 0.0}}\n    source: src\n"
        "    tolerance: 1.0\n"
    )
    result = embedkit("reproduce", "--config", _config(tmp_path, condition), "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    row = json.loads((tmp_path / "out" / "reproduce.json").read_text())["rows"][0]
    expected = evaluate(load_model(colbert_folder), scifact_subset, "test", "colbert", cache_dir=tmp_path / "cache")
    assert row["status"] == "pass" and row["metrics"]["ndcg_at_10"]["measured"] == expected["metrics"]["ndcg_at_10"]
