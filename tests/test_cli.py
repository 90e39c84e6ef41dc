"""The embedkit command end to end on real data, and its one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli

CLI = [sys.executable, "-c", "from embedkit.cli import main; main()"]
VERBS = ("encode", "index", "search", "evaluate", "rerank", "mine", "rescore", "train", "merge")


def embedkit(*args: object) -> subprocess.CompletedProcess:
    return run_cli(args)


@pytest.mark.parametrize("verb", VERBS)
def test_help_shows_an_example(verb):
    result = embedkit(verb, "--help")
    assert result.returncode == 0 and f"Example: embedkit {verb}" in result.stdout


@pytest.fixture(scope="module")
def pipeline(scifact_subset, tmp_path_factory):
    """encode -> index -> search -> evaluate through the CLI on a 150-document slice of SciFact."""
    work = tmp_path_factory.mktemp("cli")
    steps = [
        ("encode", "--dataset", scifact_subset, "--output", work / "emb"),
        ("index", "--embeddings", work / "emb", "--output", work / "idx", "--factory", "HNSW32"),
        (
            "search",
            "--index",
            work / "idx",
            "--dataset",
            scifact_subset,
            "--split",
            "test",
            "-k",
            "100",
            "--output",
            work / "run.trec",
        ),
        ("evaluate", "--dataset", scifact_subset, "--output", work / "reports", "--cache-dir", work / "cache"),
    ]
    results = [embedkit(*step) for step in steps]
    return work, results


def test_pipeline_commands_succeed(pipeline):
    _, results = pipeline
    for result in results:
        assert result.returncode == 0, result.stderr


def test_evaluate_writes_the_report_folder(pipeline, scifact_subset):
    work, results = pipeline
    (folder,) = (work / "reports").glob(f"{scifact_subset.name}__all-MiniLM-L6-v2__Flat__test__*")
    assert sorted(p.name for p in folder.iterdir()) == [
        "per_query.json",
        "report.html",
        "report.json",
        "report.md",
        "run.trec",
    ]
    report = json.loads((folder / "report.json").read_text())
    assert report["model"]["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert report["retriever"] == {
        "type": "dense",
        "factory": "Flat",
        "metric": "ip",
        "nprobe": None,
        "ef_search": None,
    }
    assert report["retrieval"] == {"k": 1000, "ignore_identical_ids": False, "search_params": {}}
    assert {"torch", "faiss-cpu", "sentence-transformers", "transformers"} <= set(report["library_versions"])
    assert report["dataset"]["doc_text"].startswith("(title + ' ' + text)")
    assert len(json.loads((folder / "per_query.json").read_text())) == 20
    assert f"{report['metrics']['ndcg_at_10']:.4f}" in (folder / "report.md").read_text()
    assert "nDCG@10 = " in results[-1].stdout


def test_search_run_scores_like_evaluate(pipeline):
    """The HNSW index searched by the CLI gives (nearly) the exact Flat evaluation's run on 150 documents."""
    from embedkit import compute_metrics, load_dataset, read_run

    work, _ = pipeline
    report = json.loads(next((work / "reports").glob("*/report.json")).read_text())
    data = load_dataset(report["dataset"]["path"])
    metrics, _ = compute_metrics(data.qrels("test"), read_run(work / "run.trec"))
    assert metrics["ndcg_at_10"] == pytest.approx(report["metrics"]["ndcg_at_10"], abs=0.01)


def _one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("embedkit: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_malformed_json_line(tmp_path):
    (tmp_path / "corpus.jsonl").write_text('{"_id": "1", "text": "ok"}\n{"_id": "2", "text": "bad\n')
    result = embedkit("encode", "--corpus", tmp_path / "corpus.jsonl", "--output", tmp_path / "e")
    _one_line_error(result, f"{tmp_path / 'corpus.jsonl'}:2: malformed JSON")


def test_missing_dataset_file(tmp_path):
    result = embedkit("evaluate", "--dataset", tmp_path / "nope", "--output", tmp_path / "r")
    _one_line_error(result, "no such dataset folder")


def test_unknown_factory(pipeline, tmp_path):
    work, _ = pipeline
    result = embedkit("index", "--embeddings", work / "emb", "--output", tmp_path / "i", "--factory", "IVFoops")
    _one_line_error(result, "factory string 'IVFoops'")


def test_wrong_dimension_between_model_and_index(pipeline, tiny_bert, tmp_path):
    work, _ = pipeline
    result = embedkit(
        "search", "--index", work / "idx", "--queries", Path(work.parent) / "q.jsonl", "--output", tmp_path / "r.trec"
    )
    _one_line_error(result, "q.jsonl: no such file")
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"_id": "q", "text": "a query"}\n')
    result = embedkit(
        "search", "--index", work / "idx", "--queries", queries, "--model", tiny_bert, "--output", tmp_path / "r.trec"
    )
    _one_line_error(result, "built with another model", "dim: index 384, model 64")


def test_index_missing_docid(pipeline, tmp_path):
    import shutil

    work, _ = pipeline
    broken = tmp_path / "idx"
    shutil.copytree(work / "idx", broken)
    (broken / "docid").unlink()
    result = embedkit("search", "--index", broken, "--queries", broken / "x.jsonl", "--output", tmp_path / "r")
    _one_line_error(result, "has no 'docid' file")


@pytest.mark.parametrize(
    "args",
    [
        ["evaluate", "-d", "scifact", "-o", "out", "-k", "0"],
        ["search", "-i", "idx", "-d", "scifact", "-o", "r.trec", "--split", "test", "--queries", "q.jsonl"],
        ["index", "-e", "emb", "-o", ".", "--metric", "cosine"],
        ["train", "-o", "m", "--batch-size", "0"],
    ],
)
def test_bad_arguments_are_refused_before_torch_is_imported(args, tmp_path):
    """A bad flag costs a fraction of a second: the verb checks it before loading torch, FAISS or the model."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "embedkit.cli", *args], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 2
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert not {"torch", "faiss", "sentence_transformers", "transformers", "datasets"} & imported
    assert result.stderr.splitlines()[-1].startswith("embedkit: error: ")


def test_search_and_tune_use_the_pooling_the_index_was_built_with(tiny_bert, scifact_subset, tmp_path):
    """A plain transformers folder pools with CLS unless told; encoded with mean pooling, its index must be searched
    and tuned with mean pooling too, as meta.json records (it used to be dropped and the model check failed)."""
    steps = [
        ("encode", "-d", scifact_subset, "-o", tmp_path / "emb", "--model", tiny_bert, "--pooling", "mean"),
        (
            "index",
            "-e",
            tmp_path / "emb",
            "-o",
            tmp_path / "idx",
            "--factory",
            "IVF4,Flat",
            "--tune",
            "--tune-dataset",
            scifact_subset,
            "--target-recall",
            "0.5",
        ),
        ("search", "-i", tmp_path / "idx", "-d", scifact_subset, "-o", tmp_path / "run.trec", "-k", "10"),
    ]
    for step in steps:
        result = embedkit(*step)
        assert result.returncode == 0, result.stderr
    meta = json.loads((tmp_path / "idx" / "meta.json").read_text())
    assert meta["model"]["pooling"] == "mean" and meta["tuning"]["queries"]["source"].startswith("20 queries")
    from embedkit import EmbedkitError, Index, load_model

    with pytest.raises(EmbedkitError, match="pooling: index 'mean', model 'cls'"):  # what the dropped pooling gave
        Index.load(tmp_path / "idx").check_model(load_model(tiny_bert).settings)
