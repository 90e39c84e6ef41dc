"""Every script in examples/ runs, as a user would run it, on real data (a 150-document slice of SciFact)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO, TEST_CACHE

EXAMPLES = REPO / "examples"


def run(script: str, *args: object, cwd: Path) -> str:
    result = subprocess.run(
        [sys.executable, EXAMPLES / script, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_every_example_has_a_test():
    tested = {"quickstart.py", "ivf_index.py", "evaluate_beir.py", "hybrid_bm25_dense.py", "compare_runs.py"}
    assert {path.name for path in EXAMPLES.glob("*.py")} == tested


def test_quickstart_finds_the_matching_document(tmp_path):
    out = run("quickstart.py", cwd=tmp_path)
    firsts = re.findall(r"-> (\w+) \(", out)
    assert firsts == ["aspirin", "statins", "vaccines"]


def test_ivf_index(scifact_subset, tmp_path):
    out = run(
        "ivf_index.py",
        "--dataset",
        scifact_subset,
        "--nlist",
        "8",
        "--nprobe",
        "8",
        "--cache",
        TEST_CACHE,
        cwd=tmp_path,
    )
    # Visiting all 8 lists is exhaustive: the IVF top-10 is the exact top-10.
    assert "nprobe 8" in out and "top-10 overlap with exact search: 1.000 over 20 queries" in out
    assert sorted(p.name for p in (tmp_path / "idx" / "ivf-example").iterdir()) == ["docid", "index", "meta.json"]


def test_evaluate_beir(scifact_subset, tmp_path):
    out = run(
        "evaluate_beir.py", "--dataset", scifact_subset, "--output", "runs", "--cache-dir", TEST_CACHE, cwd=tmp_path
    )
    ndcg = float(re.search(r"ndcg_at_10 = (\d\.\d{4})", out).group(1))
    assert 0.5 < ndcg <= 1.0
    (folder,) = (tmp_path / "runs").glob(f"{scifact_subset.name}__all-MiniLM-L6-v2__Flat__test__*")
    assert (folder / "report.html").is_file()


def test_hybrid_bm25_dense(scifact_subset, tmp_path):
    out = run("hybrid_bm25_dense.py", "--dataset", scifact_subset, "--cache-dir", TEST_CACHE, cwd=tmp_path)
    scores = dict(re.findall(r"^(dense|bm25|hybrid rrf|hybrid interpolation)\s+(\d\.\d{4})", out, re.MULTILINE))
    assert set(scores) == {"dense", "bm25", "hybrid rrf", "hybrid interpolation"}
    values = {name: float(value) for name, value in scores.items()}
    assert all(0 < value <= 1 for value in values.values())
    assert values["hybrid rrf"] >= min(values["dense"], values["bm25"])


def test_compare_runs(scifact_subset, tmp_path):
    out = run(
        "compare_runs.py", "--dataset", scifact_subset, "--output", "runs", "--cache-dir", TEST_CACHE, cwd=tmp_path
    )
    assert "Significance against" in out and "t-test p" in out
    assert (tmp_path / "runs" / "compare" / "report.html").is_file()
