"""embedkit pretrain end to end on a tiny BERT: pretrain, save, resume, reload with load_model, fine-tune, CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import kill_when, run_cli, write_jsonl
from transformers import AutoModel, AutoTokenizer

from embedkit import EmbedkitError, load_dataset, load_model
from embedkit.data import doc_text
from embedkit.pretrain import PretrainConfig, pretrain, pretraining_record
from embedkit.train import TrainConfig, train, training_record
from embedkit.training.evaluator import EncoderEvaluation, RetrievalEvaluator

CLI = [sys.executable, "-c", "from embedkit.cli import main; main()"]


def _program(command: list[str]) -> subprocess.CompletedProcess:
    """``command`` (``CLI`` and its arguments) run to its end, forked from the warm zygote (``conftest.run_cli``)."""
    return run_cli(command[len(CLI) :])


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
    assert record["steps"] == 2 and record["texts"] == 150 and record["tokens_seen"] > 0
    assert record["masks"] == "whole_word, encoder 30%, decoder 50% (enhanced decoding)"
    assert {"encoder_loss", "decoder_loss", "tokens_per_second"} <= set(record["loss_history"][0])
    # a plain BERT checkpoint: CLS, not normalised (a sentence-transformers checkpoint keeps its own; see below)
    hint = {"pooling": "cls", "sentence_pooling": "cls", "normalize": False}
    assert json.loads((output / "embedkit.json").read_text()) == hint
    assert record["config"]["learning_rate"] == 2e-5 and record["config"]["head_warmup_steps"] == 25
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

    assert load_model(_fine_tuned(output, scifact_subset, tmp_path), device="cpu").settings["pooling"] == "cls"


def _fine_tuned(encoder, corpus, tmp_path):
    """A two-step SimCSE fine-tune of a pretrained folder: it loads and trains."""
    tuned = tmp_path / "tuned"
    settings = {"corpus_limit": 16, "batch_size": 4, "max_steps": 2, "max_length": 32, "save_steps": 1000}
    train(TrainConfig(output=str(tuned), model=str(encoder), objective="simcse", dataset=str(corpus), **settings))
    assert training_record(tuned)["steps"] == 2
    return tuned


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
    assert record["chunks"] > 24  # SciFact abstracts are longer than 48 tokens: overlapping windows
    assert "DupMAE (Xiao et al., 2023)" in (output / "README.md").read_text()
    model = load_model(output)  # the duplex representation is the folder's own pooling
    assert model.settings["pooling"] == "dupmae" and model.dim == 2 * 64


def test_cli_pretrains_mlm_from_random_weights_and_reports_user_errors(tiny_bert, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("Aspirin lowers fever.\nStatins lower cholesterol in adults.\n\nVitamin D and bone density.\n")
    result = run_cli(
        [
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
        ]
    )
    assert result.returncode == 0, result.stderr[-2000:]
    record = pretraining_record(tmp_path / "mlm")
    assert record["texts"] == 3 and record["config"]["model_config"] == str(tiny_bert) and record["steps"] == 2
    assert record["config"]["learning_rate"] == 1e-4 and record["config"]["head_warmup_steps"] == 0  # from scratch

    bad = write_jsonl(tmp_path / "bad.jsonl", [{"text": "fine"}])
    with open(bad, "a") as handle:
        handle.write('{"title": "no text"}\n')
    failed = run_cli(["pretrain", "--model", str(tiny_bert), "--data", str(bad), "-o", str(tmp_path / "x")])
    assert failed.returncode == 2, failed.stderr[-2000:]
    assert failed.stderr.strip().splitlines() == [f"embedkit: error: {bad}:2: field 'text': missing"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"data": "t.txt", "masking": "everything"}, "field 'masking': unknown masking 'everything'"),
        ({"data": "t.txt", "dataset": "scifact"}, "field 'dataset': give exactly one corpus"),
        ({"data": "t.txt", "encoder_mask_ratio": 1.5}, "field 'encoder_mask_ratio': must lie between 0 and 1"),
        ({"data": "t.txt", "objective": "simcse"}, "field 'objective': unknown objective 'simcse'"),
        ({"data": "t.txt", "sentence_pooling": "max"}, "field 'sentence_pooling': unknown sentence pooling 'max'"),
        ({"data": "t.txt", "chunk_overlap": 200}, "field 'chunk_overlap': must lie between 0 and half"),
        ({"data": "t.txt", "head_warmup_steps": -1}, "field 'head_warmup_steps': must be at least 0"),
        ({"data": "t.txt", "objective": "tsdae", "model_config": "c"}, "field 'model_config': tsdae ties"),
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
        transfer_datasets=[str(scifact_subset)],
        transfer_split="test",
    )
    pretrain(config)
    curve = pretraining_record(output)["dev_curve"]
    assert [row["step"] for row in curve] == [2, 4]
    # watched as a transfer collection too, the same split scores the same at each step, and the final weights are
    # the last step's; the base (random) encoder was scored before the first step
    transfer, name = pretraining_record(output)["transfer"], scifact_subset.name
    assert [row["step"] for row in transfer["curve"]] == [2, 4]
    assert [row[name] for row in transfer["curve"]] == [row["ndcg_at_10"] for row in curve]
    assert transfer["final"][name] == curve[-1]["ndcg_at_10"] and set(transfer["base"]) == {name, "mean"}
    card = (output / "README.md").read_text()
    assert f"| {name} | {transfer['base'][name]:.4f} | {transfer['final'][name]:.4f} |" in card
    # the curve's last point scored the weights that were saved: the same evaluator on them gives the same metrics
    evaluator = RetrievalEvaluator.of(str(scifact_subset), "test", None)
    saved = EncoderEvaluation(
        evaluator, AutoModel.from_pretrained(output), AutoTokenizer.from_pretrained(output), "cls", 32, 1
    )
    assert saved.evaluate(4) == curve[-1]
    # and embeds documents and queries as the model loads. The vectors are compared, not nDCG: a 4-step random
    # encoder's top 11 scores per query lie within 2e-4 to 5e-4 of each other, near ties that another search breaks
    # another way (on the AMX CPU `evaluate` gave 0.100 against the curve's 0.114 from vectors equal bit for bit)
    scored = load_model(output, pooling="cls", max_length=32)
    texts = [doc_text(doc) for doc in load_dataset(scifact_subset).corpus]
    queries = list(evaluator.queries.values())
    with torch.inference_mode():
        pairs = [(saved.embed(texts), scored.encode(texts)), (saved.embed(queries), scored.encode_queries(queries))]
    for ours, loaded in pairs:
        print(f"largest difference {np.abs(ours - loaded).max():.2e}")
        assert np.allclose(ours, loaded, rtol=0, atol=1e-4)
    assert "Dev evaluation during pretraining" in (output / "README.md").read_text()


def _weights(model) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def test_the_head_warmup_leaves_a_sentence_transformers_encoder_untouched(scifact_subset, tmp_path):
    """From all-MiniLM-L6-v2 (mean pooling, normalised): the folder keeps both, and while the head warms up the
    encoder's vectors stay exactly the base model's; without the warm-up one step already moves them."""
    texts = ["Aspirin lowers fever in children.", "Statins and cholesterol."]
    base = load_model(max_length=32).encode_queries(texts)
    vectors = {}
    for warmup in (2, 0):
        output = tmp_path / f"warmup{warmup}"
        settings = {"corpus_limit": 8, "batch_size": 4, "max_steps": 2, "max_length": 32, "warmup_ratio": 0.0}
        pretrain(
            PretrainConfig(
                output=str(output), objective="mlm", dataset=str(scifact_subset), head_warmup_steps=warmup, **settings
            )
        )
        model = load_model(output, max_length=32)
        assert model.settings["pooling"] == "mean" and model.settings["normalize"] is True
        vectors[warmup] = model.encode_queries(texts)
    assert np.allclose(np.linalg.norm(vectors[2], axis=1), 1.0, atol=1e-5)
    assert np.allclose(vectors[2], base, atol=1e-6)
    assert not np.allclose(vectors[0], base, atol=1e-4)


def test_cli_pretrains_with_tsdae_and_the_output_fine_tunes(tiny_bert, scifact_subset, tmp_path):
    output = tmp_path / "tsdae"
    args = [*CLI, "pretrain", "--objective", "tsdae", "--model", str(tiny_bert), "--dataset", str(scifact_subset)]
    args += ["--batch-size", "4", "--max-steps", "3", "--head-warmup-steps", "1", "--max-length", "32"]
    result = _program([*args, "--logging-steps", "1", "-o", str(output)])
    assert result.returncode == 0, result.stderr[-2000:]
    record = pretraining_record(output)
    assert record["steps"] == 3 and record["masks"] == "60% of words deleted from the encoder's input"
    assert (
        "decoder_loss" in record["loss_history"][0]
        and "TSDAE (Wang et al., 2021)" in (output / "README.md").read_text()
    )
    assert (output / "modules.json").is_file()  # a sentence-transformers folder: pooling and normalisation inside
    model = load_model(output, max_length=32)
    assert model.settings["pooling"] == "cls" and model.encode_queries(["fever"]).shape == (1, 64)
    _fine_tuned(output, scifact_subset, tmp_path)
