"""embedkit train end to end on tiny local models: supervised with hard negatives, resume, SimCSE and cropping."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from conftest import kill_when, run_cli, write_jsonl
from sentence_transformers import SentenceTransformer

from embedkit import EmbedkitError, evaluate, load_model
from embedkit.train import TrainConfig, train, training_record
from embedkit.train.data import load_jsonl_examples

CLI = [sys.executable, "-c", "from embedkit.cli import main; main()"]


@pytest.fixture(scope="module")
def triples(scifact_subset, tmp_path_factory):
    """Training JSONL from the SciFact slice: query, its positive, and two other documents as negatives."""
    from embedkit import load_dataset
    from embedkit.data import doc_text

    data = load_dataset(scifact_subset)
    corpus = {row["_id"]: doc_text(row) for row in data.corpus}
    others = list(corpus.values())
    rows = []
    for i, (query_id, judged) in enumerate(data.qrels("test").items()):
        positive = corpus[next(iter(judged))]
        rows.append(
            {
                "query": data.queries[query_id],
                "positive": positive,
                "negatives": [others[(7 * i + 1) % len(others)], others[(7 * i + 2) % len(others)]],
            }
        )
    return write_jsonl(tmp_path_factory.mktemp("train") / "triples.jsonl", rows)


def _program(command: list[str]) -> subprocess.CompletedProcess:
    """``command`` (``CLI`` and its arguments) run to its end, forked from the warm zygote (``conftest.run_cli``)."""
    return run_cli(command[len(CLI) :])


def test_supervised_training_saves_a_model_both_libraries_load(tiny_bert, triples, scifact_subset, tmp_path):
    output = tmp_path / "model"
    config = TrainConfig(
        output=str(output),
        model=str(tiny_bert),
        pooling="mean",
        data=str(triples),
        num_negatives=2,
        batch_size=4,
        max_steps=4,
        save_steps=2,
        learning_rate=1e-4,
        eval_dataset=str(scifact_subset),
        logging_steps=1,
        max_length=128,
    )
    train(config)
    record = training_record(output)
    assert record["steps"] == 4 and record["examples"] == 20 and record["loss"] == "MultipleNegativesRankingLoss"
    assert record["config"]["num_negatives"] == 2 and record["loss_history"]
    card = (output / "README.md").read_text()
    assert "## embedkit training" in card and "nDCG@10" in card
    st = SentenceTransformer(str(output), device="cpu")
    ours = load_model(output, device="cpu")
    assert ours.settings["pooling"] == "mean"
    assert (st.encode(["a query"]) @ ours.encode(["a query"]).T).item() == pytest.approx(
        float((st.encode(["a query"]) ** 2).sum()), rel=1e-4
    )
    report = evaluate(ours, scifact_subset, cache_dir=tmp_path / "cache")
    assert report["metrics"]["ndcg_at_10"] == pytest.approx(record["evaluation"]["ndcg_at_10"], abs=1e-6)
    assert not (tmp_path / "model.partial").exists()  # checkpoints go once the model is committed


def _stderr_line(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    return lines[0]


def test_a_rerun_resumes_only_its_own_unfinished_run(tiny_bert, triples, tmp_path):
    """Killed mid-run, a run resumes only when asked or with the same settings; a finished one is never retrained
    silently, and another run's settings never land on its weights."""
    output = tmp_path / "model"
    partial = tmp_path / "model.partial"
    args = [*CLI, "train", "--model", str(tiny_bert), "--pooling", "mean", "--data", str(triples)]
    args += ["--num-negatives", "1", "--batch-size", "4", "--save-steps", "2", "--max-length", "32", "-o", str(output)]
    kill_when(
        [*args, "--max-steps", "400"],
        lambda: (partial / "checkpoints" / "checkpoint-2" / "trainer_state.json").is_file(),
    )
    assert not output.exists() and (partial / "run.json").is_file()

    other = _program([*args, "--max-steps", "400", "--learning-rate", "1e-3"])
    assert "unfinished run with other settings (differs in: learning_rate)" in _stderr_line(other)

    resumed = _program([*args, "--max-steps", "40", "--learning-rate", "1e-3", "--resume"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    record = training_record(output)
    assert record["resumed_from"].startswith("checkpoint-") and record["steps"] == 40
    assert record["settings_changed_on_resume"] == ["learning_rate", "max_steps"]
    assert not partial.exists()

    weights = (output / "model.safetensors").read_bytes()
    same = _program([*args, "--max-steps", "40", "--learning-rate", "1e-3"])
    assert same.returncode == 0 and (output / "model.safetensors").read_bytes() == weights  # done: nothing to do
    longer = _program([*args, "--max-steps", "44", "--learning-rate", "1e-3"])
    assert "trained with other settings (differs in: max_steps); pass --overwrite" in _stderr_line(longer)
    assert (output / "model.safetensors").read_bytes() == weights
    replaced = _program([*args, "--max-steps", "4", "--learning-rate", "1e-3", "--overwrite"])
    assert replaced.returncode == 0 and training_record(output)["steps"] == 4 and not partial.exists()


def test_gradcache_and_matryoshka_train_through_the_cli(tiny_bert, triples, tmp_path):
    result = run_cli(
        [
            "train",
            "--model",
            str(tiny_bert),
            "--data",
            str(triples),
            "--num-negatives",
            "1",
            "--mini-batch-size",
            "2",
            "--matryoshka-dims",
            "64,32",
            "--batch-size",
            "8",
            "--max-steps",
            "2",
            "--output",
            str(tmp_path / "m"),
        ]
    )
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads((tmp_path / "m" / "embedkit_training.json").read_text())
    assert record["loss"] == "MatryoshkaLoss" and record["config"]["mini_batch_size"] == 2
    assert record["config"]["matryoshka_dims"] == [64, 32]


@pytest.mark.parametrize("objective", ["simcse", "cropping"])
def test_unsupervised_objectives_lower_their_loss(tiny_bert, scifact_subset, tmp_path, objective):
    output = tmp_path / objective
    train(
        TrainConfig(
            output=str(output),
            model=str(tiny_bert),
            pooling="mean",
            objective=objective,
            dataset=str(scifact_subset),
            batch_size=16,
            max_steps=40,
            learning_rate=5e-4,
            warmup_ratio=0.0,
            logging_steps=1,
            max_length=64,
            save_steps=1000,
        )
    )
    losses = training_record(output)["loss_history"]
    assert len(losses) == 40
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    print(f"{objective}: loss {first:.3f} -> {last:.3f}")
    assert last < 0.8 * first
    trained = evaluate(load_model(output), scifact_subset, cache_dir=tmp_path / "c")["metrics"]["ndcg_at_10"]
    untrained = evaluate(load_model(tiny_bert, pooling="mean"), scifact_subset, cache_dir=tmp_path / "c")
    assert trained > untrained["metrics"]["ndcg_at_10"]


def test_bad_training_rows(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"query": "q", "positive": "p", "negatives": ["n1", "n2"]}\n{"query": "q2", "positive": "p2", '
        '"negatives": ["n1"]}\n'
    )
    with pytest.raises(EmbedkitError, match=r"bad.jsonl:2: field 'negatives': has 1 negatives, 2 needed"):
        load_jsonl_examples(path)
    path.write_text('{"query": "q", "positive": "p"}\n{"query": "", "positive": "p2"}\n')
    with pytest.raises(EmbedkitError, match=r"bad.jsonl:2: field 'query': must be a non-empty string"):
        load_jsonl_examples(path)
    path.write_text('{"query": "q", "positive": "p", "negatives": ["n"]}\n')
    with pytest.raises(EmbedkitError, match=r"field 'scores': needs 2 teacher scores"):
        load_jsonl_examples(path, with_scores=True)


def test_config_file_errors(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text("output: out\nbatchsize: 8\n")
    with pytest.raises(EmbedkitError, match=r"train.yaml: field 'batchsize': unknown setting"):
        TrainConfig.from_yaml(path)
    path.write_text("output: out\nobjective: magic\n")
    with pytest.raises(EmbedkitError, match="unknown objective 'magic'"):
        TrainConfig.from_yaml(path).check()


def test_torchrun_ddp_training_on_two_cpu_processes(tiny_bert, triples, tmp_path):
    """`embedkit train` under a real torchrun (gloo): both ranks train, rank 0 saves, cross-device negatives on."""
    import os
    import shutil
    from pathlib import Path

    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
    result = subprocess.run(
        [
            torchrun,
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "embedkit.cli",
            "train",
            "--model",
            str(tiny_bert),
            "--data",
            str(triples),
            "--num-negatives",
            "1",
            "--batch-size",
            "4",
            "--max-steps",
            "2",
            "--output",
            str(tmp_path / "ddp"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    record = training_record(tmp_path / "ddp")
    assert record["world_size"] == 2 and record["steps"] == 2
    assert load_model(tmp_path / "ddp", device="cpu").encode(["text"]).shape == (1, 64)


def test_training_evaluates_on_a_dev_set_like_embedkit_evaluate(tiny_bert, triples, scifact_subset, tmp_path):
    """The dev evaluator scores as `embedkit evaluate` does; its curve lands in the record and the generated card."""
    output = tmp_path / "model"
    config = TrainConfig(
        output=str(output),
        model=str(tiny_bert),
        pooling="mean",
        data=str(triples),
        num_negatives=1,
        batch_size=4,
        max_steps=4,
        learning_rate=1e-4,
        dev_dataset=str(scifact_subset),
        dev_split="test",
        eval_steps=2,
        max_length=64,
    )
    train(config)
    curve = training_record(output)["dev_curve"]
    assert [row["step"] for row in curve] == [2, 4]
    # The evaluator scores exactly as `evaluate`: given the same vectors, the same metrics. (During training it
    # encodes with sentence-transformers' own batching, whose float noise can swap near-tied documents.)
    from embedkit import load_dataset
    from embedkit.training.evaluator import RetrievalEvaluator

    model = load_model(output)
    evaluator = RetrievalEvaluator(load_dataset(scifact_subset), "test")
    ours = evaluator.metrics(evaluator.run(model.encode_queries, model.encode))
    final = evaluate(model, scifact_subset, cache_dir=tmp_path / "c")["metrics"]
    assert ours == pytest.approx({name: final[name] for name in ours}, abs=1e-9)
    assert curve[-1]["ndcg_at_10"] == pytest.approx(final["ndcg_at_10"], abs=0.01)
    # sentence-transformers' own card carries the last dev score (it rounds to 4 places and drops trailing zeros)
    card = (output / "README.md").read_text()
    carded = re.findall(r"^\| \**(?:\S+_)?ndcg_at_10\** +\| \**([0-9.]+)\**", card, flags=re.MULTILINE)
    assert "Retrieval" in card and carded, card
    assert float(carded[-1]) == pytest.approx(curve[-1]["ndcg_at_10"], abs=5e-5)
