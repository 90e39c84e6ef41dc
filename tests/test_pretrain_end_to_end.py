"""embedkit pretrain end to end on a tiny BERT: pretrain, save, resume, reload with load_model, fine-tune, CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import kill_when, write_jsonl
from transformers import AutoModel, AutoTokenizer

from embedkit import EmbedkitError, load_model
from embedkit.pretrain import PretrainConfig, pretrain, pretraining_record
from embedkit.train import TrainConfig, train, training_record

CLI = [sys.executable, "-c", "from embedkit.cli import main; main()"]


def test_pretrain_saves_an_encoder_that_loads_and_fine_tunes(tiny_bert, scifact_subset, tmp_path):
    output = tmp_path / "retromae"
    config = PretrainConfig(
        output=str(output),
        objective="retromae",
        model=str(tiny_bert),
        dataset=str(scifact_subset),
        masking="whole_word",
        batch_size=4,
        max_steps=2,
        max_length=64,
        save_steps=2,
        logging_steps=1,
    )
    pretrain(config)
    record = pretraining_record(output)
    assert record["steps"] == 2 and record["texts"] == 300 and record["tokens_seen"] > 0
    assert record["masks"] == "whole_word, encoder 30%, decoder 50% (enhanced decoding)"
    assert {"encoder_loss", "decoder_loss", "tokens_per_second"} <= set(record["loss_history"][0])
    assert json.loads((output / "embedkit.json").read_text()) == {"pooling": "cls"}
    assert (output / "model.safetensors").is_file() and (output / "tokenizer.json").is_file()
    card = (output / "README.md").read_text()
    for needle in ("objective: retromae", "RetroMAE (Xiao et al., 2022)", "masks: whole_word", "steps: 2", "corpus:"):
        assert needle in card

    model = load_model(output, pooling="cls", device="cpu")
    text = "Aspirin lowers fever in children."
    ours = model.encode_queries([text])
    tokenizer, plain = AutoTokenizer.from_pretrained(output), AutoModel.from_pretrained(output)
    with torch.no_grad():
        cls = plain(**tokenizer([text], return_tensors="pt")).last_hidden_state[:, 0].numpy()
    assert ours.shape == (1, 64) and np.allclose(ours, cls, atol=1e-5)
    assert load_model(output).settings["pooling"] == "cls"  # from the embedkit.json hint
    assert load_model(output, pooling="dupmae").encode_queries([text]).shape == (1, 128)

    tuned = tmp_path / "tuned"
    train(
        TrainConfig(
            output=str(tuned),
            model=str(output),
            objective="simcse",
            dataset=str(scifact_subset),
            corpus_limit=16,
            batch_size=4,
            max_steps=2,
            max_length=64,
            save_steps=1000,
        )
    )
    assert training_record(tuned)["steps"] == 2
    assert load_model(tuned, device="cpu").settings["pooling"] == "cls"


def test_a_killed_pretraining_resumes_from_its_last_checkpoint(tiny_bert, scifact_subset, tmp_path):
    output, partial = tmp_path / "mlm", tmp_path / "mlm.partial"
    args = [*CLI, "pretrain", "--objective", "mlm", "--model", str(tiny_bert), "--dataset", str(scifact_subset)]
    args += ["--batch-size", "4", "--max-length", "32", "--save-steps", "2", "--max-steps", "60", "-o", str(output)]
    kill_when(args, lambda: (partial / "checkpoints" / "checkpoint-2" / "trainer_state.json").is_file())
    assert not output.exists()
    resumed = subprocess.run(args, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    record = pretraining_record(output)
    assert record["resumed_from"].startswith("checkpoint-") and record["steps"] == 60
    assert record["settings_changed_on_resume"] == [] and not partial.exists()


def test_dupmae_and_idf_masking_from_a_jsonl_corpus(tiny_bert, scifact, tmp_path):
    rows = [{"_id": r["_id"], "title": r["title"], "text": r["text"]} for r in scifact.corpus.select(range(24))]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", rows)
    output = pretrain(
        PretrainConfig(
            output=str(tmp_path / "dupmae"),
            objective="dupmae",
            model=str(tiny_bert),
            data=str(corpus),
            masking="idf",
            batch_size=4,
            max_steps=2,
            max_length=48,
            logging_steps=1,
        )
    )
    record = pretraining_record(output)
    assert record["texts"] == 24 and "bow_loss" in record["loss_history"][0]
    assert "DupMAE (Xiao et al., 2023)" in (output / "README.md").read_text()


def test_cli_pretrains_mlm_from_random_weights_and_reports_user_errors(tiny_bert, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("Aspirin lowers fever.\nStatins lower cholesterol in adults.\n\nVitamin D and bone density.\n")
    result = subprocess.run(
        [
            *CLI,
            "pretrain",
            "--objective",
            "mlm",
            "--model-config",
            str(tiny_bert),
            "--data",
            str(texts),
            "--batch-size",
            "2",
            "--max-steps",
            "2",
            "--max-length",
            "32",
            "-o",
            str(tmp_path / "mlm"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    record = pretraining_record(tmp_path / "mlm")
    assert record["texts"] == 3 and record["config"]["model_config"] == str(tiny_bert) and record["steps"] == 2

    bad = write_jsonl(tmp_path / "bad.jsonl", [{"text": "fine"}])
    with open(bad, "a") as handle:
        handle.write('{"title": "no text"}\n')
    failed = subprocess.run(
        [*CLI, "pretrain", "--model", str(tiny_bert), "--data", str(bad), "-o", str(tmp_path / "x")],
        capture_output=True,
        text=True,
    )
    assert failed.returncode == 2, failed.stderr[-2000:]
    assert failed.stderr.strip().splitlines() == [f"embedkit: error: {bad}:2: field 'text': missing"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"data": "t.txt", "masking": "everything"}, "field 'masking': unknown masking 'everything'"),
        ({"data": "t.txt", "dataset": "scifact"}, "field 'dataset': give exactly one corpus"),
        ({"data": "t.txt", "encoder_mask_ratio": 1.5}, "field 'encoder_mask_ratio': must lie between 0 and 1"),
        ({"data": "t.txt", "objective": "simcse"}, "field 'objective': unknown objective 'simcse'"),
    ],
)
def test_config_errors_name_the_field(settings, message):
    with pytest.raises(EmbedkitError, match=message):
        PretrainConfig(output="out", **settings).check()


def test_yaml_config_rejects_unknown_settings_with_the_file(tmp_path):
    path = tmp_path / "pretrain.yaml"
    path.write_text("output: out\nobjective: dupmae\nmask_ratio: 0.3\n")
    with pytest.raises(EmbedkitError, match=r"pretrain.yaml: field 'mask_ratio': unknown setting"):
        PretrainConfig.from_yaml(path)
    path.write_text("output: out\nobjective: dupmae\nmax_steps: 7\n")
    assert PretrainConfig.from_yaml(path, max_steps=9).max_steps == 9


def test_pretraining_evaluates_the_encoder_on_a_dev_set(tiny_bert, scifact_subset, tmp_path):
    output = tmp_path / "mlm"
    config = PretrainConfig(
        output=str(output),
        objective="mlm",
        model=str(tiny_bert),
        dataset=str(scifact_subset),
        batch_size=4,
        max_steps=4,
        max_length=32,
        dev_dataset=str(scifact_subset),
        dev_split="test",
        eval_steps=2,
    )
    pretrain(config)
    curve = pretraining_record(output)["dev_curve"]
    assert [row["step"] for row in curve] == [2, 4]
    scored = load_model(output, pooling="cls", max_length=32)
    from embedkit import evaluate

    final = evaluate(scored, scifact_subset, cache_dir=tmp_path / "c")["metrics"]["ndcg_at_10"]
    assert curve[-1]["ndcg_at_10"] == pytest.approx(final, abs=0.01)  # other batching: near ties may swap
    assert "Dev evaluation during pretraining" in (output / "README.md").read_text()
