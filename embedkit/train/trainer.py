"""``train``: a TrainConfig to a sentence-transformers model folder, through sentence-transformers' Trainer (a thin
subclass of the Hugging Face Trainer, so checkpoints, resume, bf16/fp16 and torchrun DDP come with it)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import datasets
from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from sentence_transformers.base.sampler import BatchSamplers

from embedkit.data.beir import load_dataset
from embedkit.environment import library_versions
from embedkit.evaluation.pipeline import EvaluateOptions, evaluate
from embedkit.models.loading import load_model
from embedkit.storage import read_json, write_json, write_text
from embedkit.train.config import TrainConfig
from embedkit.train.data import beir_pairs, load_jsonl_examples
from embedkit.train.losses import build_loss
from embedkit.train.unsupervised import cropping_pairs, simcse_pairs
from embedkit.training.arguments import shared_training_arguments
from embedkit.training.evaluator import RetrievalEvaluator
from embedkit.training.run_folder import MODEL_KIND, RECORDS, TrainingRun, partial_folder, prepare_run, run_lock

RECORD = RECORDS[MODEL_KIND]


def training_data(config: TrainConfig) -> datasets.Dataset:
    """The examples the config names: a JSONL file, a BEIR split's qrels pairs, or pairs made from a raw corpus."""
    if config.objective == "supervised" and config.data:
        return load_jsonl_examples(
            config.data,
            config.num_negatives,
            with_scores=config.loss == "distill",
            drop_short=config.drop_short_examples,
        )
    dataset = load_dataset(config.dataset, data_dir=config.data_dir)
    if config.objective == "supervised":
        return beir_pairs(dataset, config.train_split)
    if config.objective == "simcse":
        return simcse_pairs(dataset.corpus, config.corpus_limit)
    return cropping_pairs(dataset.corpus, config.corpus_limit, seed=config.seed)


def _card_section(record: dict[str, Any]) -> str:
    config = record["config"]
    rows = [f"| {k} | `{v!r}` |" for k, v in config.items()]
    lines = [
        "",
        "## embedkit training",
        "",
        f"- objective: {config['objective']}; loss: {record['loss']}",
        f"- data: {record['data']}",
        f"- examples: {record['examples']}; steps: {record['steps']}; wall time: {record['train_seconds']:.0f} s",
    ]
    if record.get("evaluation"):
        evaluation = record["evaluation"]
        lines.append(
            f"- evaluation: {evaluation['dataset']} ({evaluation['split']}) nDCG@10 = {evaluation['ndcg_at_10']:.4f}"
        )
    lines += ["", "| setting | value |", "| --- | --- |", *rows, ""]
    return "\n".join(lines)


def train(config: TrainConfig) -> Path:
    """Train and save to ``config.output``; returns the folder (loadable by ``SentenceTransformer`` and embedkit).

    Checkpoints go to ``OUTPUT.partial``; the finished model takes ``OUTPUT``'s place in one step (see
    ``embedkit.training.run_folder`` for when a rerun resumes, is refused, or finds the work done).
    """
    config.check()
    output = Path(config.output)
    evaluation = {"eval_strategy": "steps", "eval_steps": config.eval_steps or config.save_steps}
    args = SentenceTransformerTrainingArguments(
        **shared_training_arguments(config, partial_folder(output) / "checkpoints"),
        **(evaluation if config.dev_dataset else {}),
        batch_sampler=BatchSamplers.NO_DUPLICATES if config.objective == "supervised" else BatchSamplers.BATCH_SAMPLER,
        disable_tqdm=False,
    )
    main = args.process_index == 0
    with run_lock(output, main):
        with args.main_process_first(local=False, desc="preparing the output folder"):
            run = prepare_run(
                output, MODEL_KIND, asdict(config), resume=config.resume, overwrite=config.overwrite, main=main
            )
        if run is None:
            return output
        return _train_run(config, run, args)


def _train_run(config: TrainConfig, run: TrainingRun, args: SentenceTransformerTrainingArguments) -> Path:
    model = load_model(config.model, pooling=config.pooling, max_length=config.max_length)
    examples = training_data(config)
    loss = build_loss(
        model.st,
        config.loss,
        temperature=config.temperature,
        symmetric=config.symmetric,
        learn_temperature=config.learn_temperature,
        mini_batch_size=config.mini_batch_size,
        matryoshka_dims=config.matryoshka_dims,
        gather_across_devices=args.world_size > 1,
    )
    evaluator = (
        RetrievalEvaluator.of(config.dev_dataset, config.dev_split, config.data_dir) if config.dev_dataset else None
    )
    trainer = SentenceTransformerTrainer(
        model=model.st, args=args, train_dataset=examples, loss=loss, evaluator=evaluator
    )
    result = trainer.train(resume_from_checkpoint=run.resume_from)
    if not trainer.is_world_process_zero():
        return run.output
    staging = run.fresh_staging()
    model.st.save(str(staging))
    record: dict[str, Any] = {
        "format": f"embedkit.{MODEL_KIND}/1",
        "config": asdict(config),
        "base_model": model.settings,
        "data": config.data or f"{config.dataset} ({config.objective}, split {config.train_split})",
        "loss": type(loss).__name__,
        "examples": len(examples),
        "examples_dropped": json.loads(examples.info.description or "{}").get("dropped_short_rows", 0),
        "steps": trainer.state.global_step,
        "train_seconds": result.metrics.get("train_runtime", 0.0),
        "train_loss": result.metrics.get("train_loss"),
        "loss_history": [row["loss"] for row in trainer.state.log_history if "loss" in row],
        "dev_curve": dev_curve(trainer.state.log_history, evaluator),
        "resumed_from": run.resume_from and Path(run.resume_from).name,
        "settings_changed_on_resume": run.changed_on_resume,
        "world_size": args.world_size,
        "library_versions": library_versions(),
    }
    if config.eval_dataset:
        options = EvaluateOptions(data_dir=config.data_dir)
        report = evaluate(load_model(staging), config.eval_dataset, config.eval_split, options=options)
        record["evaluation"] = {
            "dataset": config.eval_dataset,
            "split": config.eval_split,
            "ndcg_at_10": report["metrics"]["ndcg_at_10"],
            "metrics": report["metrics"],
        }
    write_json(staging / RECORD, record)
    card = staging / "README.md"
    write_text(card, (card.read_text() if card.is_file() else f"# {run.output.name}\n") + _card_section(record))
    return run.commit()


def dev_curve(log_history: list[dict[str, Any]], evaluator: RetrievalEvaluator | None) -> list[dict[str, Any]]:
    """The dev metrics logged at each evaluation step (the Trainer prefixes them ``eval_``)."""
    if evaluator is None:
        return []
    prefix = f"eval_{evaluator.name}_"
    return [
        {
            "step": row["step"],
            **{key.removeprefix(prefix): value for key, value in row.items() if key.startswith(prefix)},
        }
        for row in log_history
        if any(key.startswith(prefix) for key in row)
    ]


def training_record(folder: str | Path) -> dict[str, Any]:
    return read_json(Path(folder) / RECORD)
