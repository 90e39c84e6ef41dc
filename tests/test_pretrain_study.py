"""The pre-registered domain-adaptation study (``benchmarks/domain_adaptation_scifact.py``) end to end at toy size:
the ``--from-scratch`` path (MLM, RetroMAE, DupMAE from one random 2-layer BERT), a summary with ``embedkit
compare``'s output and a verdict per arm, and a rerun that resumes from the stage records instead of recomputing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_scifact_slice

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "domain_adaptation_scifact.py"
VERDICTS = {"helps", "hurts", "no measurable effect at this budget"}


@pytest.fixture(scope="module")
def toy_beir(tmp_path_factory, scifact) -> Path:
    """20 train and 20 test SciFact queries, their relevant documents and others: 240 documents."""
    return write_scifact_slice(tmp_path_factory.mktemp("toy-beir"), scifact, {"train": 20, "test": 20}, 240, 400)


# a benchmark script's test (149 s of `make test` on an AVX2 CPU, 2026-12-03); the objectives it runs are tested in
# test_pretrain_end_to_end.py, and `make test-slow` runs this one
@pytest.mark.slow
def test_the_from_scratch_study_runs_end_to_end_and_resumes(toy_beir, tmp_path):
    output = tmp_path / "study"
    command = [sys.executable, str(SCRIPT), "--from-scratch", "--toy", "--dataset", str(toy_beir)]
    command += ["--output", str(output), "--steps", "2", "--seeds", "1,2", "--max-length", "48"]
    command += ["--finetune-epochs", "3", "--eval-dtype", "float32"]
    first = subprocess.run(command, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads((output / "summary.json").read_text())
    rows = summary["rows"]
    assert set(rows) == {"base", "finetune", "mlm", "retromae", "dupmae"}
    for arm in ("mlm", "retromae", "dupmae"):
        assert rows[arm]["pretraining"]["steps"] == 2 and rows[arm]["pretraining"]["head_warmup_steps"] == 0
        assert [s["seed"] for s in rows[arm]["seeds"]] == [1, 2]
        compared = summary["compare"][arm]
        assert compared["verdict"] in VERDICTS
        assert "Significance against finetune" in compared["output"] and compared["test"]["queries"] == 20
    record = json.loads((output / "pretrained" / "retromae" / "embedkit_pretraining.json").read_text())
    assert record["config"]["learning_rate"] == 1e-4 and record["config"]["sentence_pooling"] == "mean"
    assert json.loads((output / "finetuned" / "mlm" / "seed2" / "embedkit_training.json").read_text())["steps"] >= 3
    assert "| mlm | 2 (+0) |" in (output / "summary.md").read_text()

    stages = {path: path.stat().st_mtime_ns for path in (output / "stages").iterdir()}
    again = subprocess.run(command, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {path: path.stat().st_mtime_ns for path in (output / "stages").iterdir()} == stages
    assert json.loads((output / "summary.json").read_text())["rows"] == rows
