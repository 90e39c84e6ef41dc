"""``train``: a TrainConfig to a sentence-transformers model folder, through sentence-transformers' Trainer (a thin
subclass of the Hugging Face Trainer, so checkpoints, resume, bf16/fp16 and torchrun DDP come with it)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import datasets
from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from sentence_transformers.base.evaluation.sequential import SequentialEvaluator
from sentence_transformers.base.sampler import BatchSamplers

from embedkit.data.beir import load_dataset
from embedkit.environment import library_versions
from embedkit.evaluation.pipeline import EvaluateOptions, evaluate
from embedkit.models.loading import load_model
from embedkit.storage import read_json, write_json, write_text
from embedkit.train.card import card_section
from embedkit.train.config import TrainConfig
from embedkit.train.cross_encoder import (
    CrossEncoderTrainer,
    CrossEncoderTrainingArguments,
    cross_encoder_examples,
    cross_encoder_loss,
    load_cross_encoder,
    negative_columns,
)
from embedkit.train.data import QUERY_ID, beir_pairs, carve_dev, load_jsonl_examples
from embedkit.train.losses import build_loss
from embedkit.train.merge import auto_alpha, interpolate, keep_checkpoints, soup_of_checkpoints, state_of
from embedkit.train.merge_settings import ALPHA_RULE
from embedkit.train.recipes import RECIPES
from embedkit.train.seeded import seeded
from embedkit.train.sparse import loss_callbacks
from embedkit.train.unsupervised import cropping_pairs, simcse_pairs
from embedkit.training.arguments import shared_training_arguments
from embedkit.training.evaluator import RerankEvaluator, RetrievalEvaluator
from embedkit.training.run_folder import (
    MODEL_KIND,
    RECORDS,
    TrainingRun,
    checkpoint_step,
    locked_run,
    partial_folder,
    prepare_run,
)
from embedkit.training.transfer import transfer_curve, transfer_evaluators, transfer_record, transfer_scores

RECORD = RECORDS[MODEL_KIND]
RERANK_DEV_DEPTH = 30  # BM25 hits per dev query a cross-encoder reranks during training


def training_data(config: TrainConfig) -> datasets.Dataset:
    """The examples the config names: a JSONL file, a BEIR split's qrels pairs, or pairs made from a raw corpus."""
    if config.data and (config.objective in ("supervised", "cross-encoder") or config.family is not None):
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


def dev_set_name(config: TrainConfig) -> str:
    """The dev evaluator's name, known before it is built (the Trainer's best-checkpoint metric is named by it)."""
    if config.dev_fraction:
        name = f"{Path(config.dataset).name}-{config.train_split}-carved"
    else:
        name = f"{Path(config.dev_dataset).name}-{config.dev_split}"
    return f"{name}-bm25@{RERANK_DEV_DEPTH}" if config.cross_encoder else name


def training_arguments(config: TrainConfig, checkpoints: Path) -> Any:
    """Trainer arguments; with a dev set it is evaluated every ``eval_steps`` (a checkpoint is saved at each) and
    the checkpoint best by dev nDCG@10 is the model saved."""
    arguments = shared_training_arguments(config, checkpoints)
    if config.has_dev_set or config.transfer_datasets:
        steps = config.eval_steps or config.save_steps
        arguments |= {"eval_strategy": "steps", "eval_steps": steps, "save_steps": steps}
    if config.soup_last:  # the best checkpoint is kept besides the last ones
        arguments["save_total_limit"] = max(config.save_total_limit, config.soup_last + 1)
    if config.keep_checkpoints:  # every one of them, for soups and merges later
        arguments["save_total_limit"] = None
    if config.has_dev_set:
        arguments |= {
            "load_best_model_at_end": True,
            "metric_for_best_model": f"eval_{dev_set_name(config)}_ndcg_at_10",
            "greater_is_better": True,
        }
    if config.cross_encoder:
        return CrossEncoderTrainingArguments(**arguments, disable_tqdm=False)
    if config.family is not None:
        return RECIPES[config.family].arguments(arguments, config)
    sampler = BatchSamplers.NO_DUPLICATES if config.objective == "supervised" else BatchSamplers.BATCH_SAMPLER
    return SentenceTransformerTrainingArguments(**arguments, batch_sampler=sampler, disable_tqdm=False)


def train(config: TrainConfig) -> Path:
    """Train and save to ``config.output``; returns the folder (loadable by ``SentenceTransformer`` and embedkit,
    or by ``CrossEncoder`` for the cross-encoder objective).

    Checkpoints go to ``OUTPUT.partial``; the finished model takes ``OUTPUT``'s place in one step (see
    ``embedkit.training.run_folder`` for when a rerun resumes, is refused, or finds the work done).
    """
    config.check()
    output = Path(config.output)
    args = training_arguments(config, partial_folder(output) / "checkpoints")
    main = args.process_index == 0
    with locked_run(output, main) as made:
        with args.main_process_first(local=False, desc="preparing the output folder"):
            run = prepare_run(
                output, MODEL_KIND, asdict(config), resume=config.resume, overwrite=config.overwrite, main=main
            )
        if run is None:
            return output
        made.append(run)
        return _train_run(config, run, args)


def _dev_evaluator(config: TrainConfig, dev_ids: list[str] | None) -> Any:
    if not config.has_dev_set:
        return None
    if dev_ids is not None:
        dataset = load_dataset(config.dataset, data_dir=config.data_dir)
        retrieval = RetrievalEvaluator(dataset, config.train_split, query_ids=dev_ids, dtype=config.dev_dtype)
    else:
        dataset = load_dataset(config.dev_dataset, data_dir=config.data_dir)
        retrieval = RetrievalEvaluator(dataset, config.dev_split, dtype=config.dev_dtype)
    return RerankEvaluator(retrieval, dataset, RERANK_DEV_DEPTH) if config.cross_encoder else retrieval


def _model_and_loss(config: TrainConfig, examples: datasets.Dataset, world_size: int) -> tuple[Any, Any, Any, dict]:
    """(network, loss, examples as the loss reads them, what the network started from); what they add to the start
    model is drawn from ``config.seed``."""
    with seeded(config.seed):
        return _new_model_and_loss(config, examples, world_size)


def _new_model_and_loss(config: TrainConfig, examples: datasets.Dataset, world_size: int) -> tuple[Any, Any, Any, dict]:
    if config.family is not None:
        network, loss, started = RECIPES[config.family].model_and_loss(config, examples)
        return network, loss, examples, started
    if config.cross_encoder:
        network, started = load_cross_encoder(config.model, config.max_length)
        negatives = len(negative_columns(examples))
        loss = cross_encoder_loss(network, config.loss, negatives)
        return network, loss, cross_encoder_examples(examples, config.loss), started
    model = load_model(config.model, pooling=config.pooling, max_length=config.max_length)
    loss = build_loss(
        model.st,
        config.loss,
        temperature=config.temperature,
        teacher_temperature=config.teacher_temperature,
        symmetric=config.symmetric,
        learn_temperature=config.learn_temperature,
        mini_batch_size=config.mini_batch_size,
        matryoshka_dims=config.matryoshka_dims,
        gather_across_devices=world_size > 1,
    )
    return model.st, loss, examples, model.settings


def trainer_class(config: TrainConfig) -> Any:
    if config.family is not None:
        return RECIPES[config.family].trainer()
    return CrossEncoderTrainer if config.cross_encoder else SentenceTransformerTrainer


def _train_run(config: TrainConfig, run: TrainingRun, args: Any) -> Path:
    examples, dev_ids = training_data(config), None
    if config.dev_fraction:
        examples, dev_ids = carve_dev(examples, config.dev_fraction, config.seed)
    if QUERY_ID in examples.column_names:
        examples = examples.remove_columns(QUERY_ID)
    evaluator = _dev_evaluator(config, dev_ids)
    network, loss, rows, started = _model_and_loss(config, examples, args.world_size)
    transfers = transfer_evaluators(config.transfer_datasets, config.transfer_split, config.data_dir, config.dev_dtype)
    base_state = state_of(network) if config.merge_with_base is not None else None
    main = args.process_index == 0  # the base model is scored once, by the process that writes the record
    base_transfer = transfer_scores(transfers, lambda watch: watch.score(network)) if main else None
    watching = [watch for watch in (evaluator, *transfers) if watch is not None]
    trainer = trainer_class(config)(
        model=network,
        args=args,
        train_dataset=rows,
        loss=loss,
        callbacks=loss_callbacks(loss),
        evaluator=SequentialEvaluator(watching) if len(watching) > 1 else next(iter(watching), None),
    )
    result = trainer.train(resume_from_checkpoint=run.resume_from)
    if not trainer.is_world_process_zero():
        return run.output
    weights = final_weights(config, network, run, evaluator, base_state)
    staging = run.fresh_staging()
    network.save(str(staging))
    kept = keep_checkpoints(run.checkpoints, staging / "checkpoints") if config.keep_checkpoints else None
    described = json.loads(examples.info.description or "{}")
    record: dict[str, Any] = {
        "format": f"embedkit.{MODEL_KIND}/1",
        "config": asdict(config),
        "base_model": started,
        "data": config.data or f"{config.dataset} ({config.objective}, split {config.train_split})",
        "loss": type(loss).__name__,
        "teacher": described.get("teacher"),
        "examples": len(examples),
        "training_rows": len(rows),
        "examples_dropped": described.get("dropped_short_rows", 0),
        "dev_queries": dev_ids,
        "steps": trainer.state.global_step,
        "train_seconds": result.metrics.get("train_runtime", 0.0),
        "train_loss": result.metrics.get("train_loss"),
        "loss_history": [row["loss"] for row in trainer.state.log_history if "loss" in row],
        # a combined loss's terms as logged (SPLADE's ranking and FLOPS terms, CSR's ranking and reconstruction)
        "loss_terms": [
            {name: value for name, value in row.items() if "loss" in name and name != "loss"}
            for row in trainer.state.log_history
            if "loss" in row
        ],
        "dev_curve": dev_curve(trainer.state.log_history, evaluator),
        "best_checkpoint": best_checkpoint(trainer.state) if evaluator is not None else None,
        "weights": weights,
        "checkpoints_kept": kept,
        "transfer": transfer_record(
            config.transfer_split,
            base_transfer,
            transfer_curve(trainer.state.log_history, transfers),
            transfer_scores(transfers, lambda watch: watch.score(network)),
        )
        if transfers
        else None,
        "resumed_from": run.resume_from and Path(run.resume_from).name,
        "settings_changed_on_resume": run.changed_on_resume,
        "world_size": args.world_size,
        "library_versions": library_versions(),
    }
    if config.eval_dataset and not config.cross_encoder:
        options = EvaluateOptions(data_dir=config.data_dir)
        retriever = "dense" if config.family is None else RECIPES[config.family].retriever
        report = evaluate(load_model(staging), config.eval_dataset, config.eval_split, retriever, options=options)
        record["evaluation"] = {
            "dataset": config.eval_dataset,
            "split": config.eval_split,
            "ndcg_at_10": report["metrics"]["ndcg_at_10"],
            "metrics": report["metrics"],
        }
    write_json(staging / RECORD, record)
    card = staging / "README.md"
    write_text(card, (card.read_text() if card.is_file() else f"# {run.output.name}\n") + card_section(record))
    return run.commit()


def final_weights(
    config: TrainConfig, network: Any, run: TrainingRun, dev: Any, base_state: dict | None
) -> dict[str, Any] | None:
    """Make the weights to save from the trained ones: the soup of the last checkpoints, then the interpolation with
    the base model (``embedkit.train.merge``); None when the trained weights are saved as they are."""
    if not (config.soup_last or config.merge_with_base is not None):
        return None
    weights: dict[str, Any] = {"soup_steps": None, "alpha": None, "alpha_rule": None, "dev_scores": None}
    if config.soup_last:
        weights["soup_steps"] = soup_of_checkpoints(network, run.checkpoints, config.soup_last)
        if dev is not None:
            weights["soup_dev_ndcg_at_10"] = dev.score(network)["ndcg_at_10"]
    if config.merge_with_base == "auto":
        alpha, scores = auto_alpha(network, base_state, state_of(network), dev)
        weights |= {"alpha": alpha, "alpha_rule": ALPHA_RULE, "dev_scores": {str(a): s for a, s in scores.items()}}
    elif config.merge_with_base is not None:
        network.load_state_dict(interpolate(base_state, state_of(network), config.merge_with_base))
        weights["alpha"] = config.merge_with_base
    return weights


def best_checkpoint(state: Any) -> dict[str, Any] | None:
    """The step whose dev nDCG@10 was best (its weights are the ones saved) and that score."""
    if state.best_model_checkpoint is None:
        return None
    step = checkpoint_step(Path(state.best_model_checkpoint))
    return {"step": step, "ndcg_at_10": state.best_metric}


def dev_curve(log_history: list[dict[str, Any]], evaluator: Any) -> list[dict[str, Any]]:
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
