"""``pretrain``: a PretrainConfig to an encoder folder, through a thin subclass of the Hugging Face Trainer
(checkpoints and resume, seed, bf16 where supported, ``torchrun`` DDP with gloo on CPUs all come with it).

The folder is a plain transformers folder (config, safetensors, tokenizer; the masked-LM model, so its MLM head stays
for further pretraining), an ``embedkit.json`` pooling hint of ``cls`` and a README card; ``embedkit.load_model``
loads it and ``embedkit train --model FOLDER`` fine-tunes it.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import datasets
import safetensors.torch
from torch import nn
from tqdm.auto import tqdm
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_callback import ProgressCallback

from embedkit.environment import library_versions
from embedkit.errors import EmbedkitError
from embedkit.pretrain.collator import PretrainCollator
from embedkit.pretrain.config import PretrainConfig
from embedkit.pretrain.data import corpus_idf, load_texts, tokenize
from embedkit.pretrain.dupmae import DupMAE
from embedkit.pretrain.encoder import load_encoder
from embedkit.pretrain.masking import Masker
from embedkit.pretrain.mlm import MaskedLM
from embedkit.pretrain.retromae import RetroMAE
from embedkit.storage import read_json, write_json, write_text
from embedkit.training.arguments import shared_training_arguments
from embedkit.training.evaluator import EncoderEvaluation, RetrievalEvaluator
from embedkit.training.run_folder import ENCODER_KIND, RECORDS, TrainingRun, partial_folder, prepare_run, run_lock

RECORD = RECORDS[ENCODER_KIND]


class ProgressBar(TrainerCallback):
    """One bar on the main process: steps, the last logged loss and tokens per second (all processes)."""

    def __init__(self) -> None:
        self.tokens = 0
        self.bar: tqdm | None = None
        self.loss: float | None = None

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        self.start, self.start_tokens, self.step = time.perf_counter(), self.tokens, state.global_step
        if state.is_world_process_zero:
            self.bar = tqdm(total=state.max_steps, initial=state.global_step, desc="pretraining", dynamic_ncols=True)

    def tokens_per_second(self, world_size: int) -> float:
        return (self.tokens - self.start_tokens) * world_size / max(time.perf_counter() - self.start, 1e-9)

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if self.bar is not None:
            self.bar.update(state.global_step - self.step)
            self.step = state.global_step
            postfix = {"tok/s": f"{self.tokens_per_second(args.world_size):.0f}"}
            if self.loss is not None:
                postfix["loss"] = f"{self.loss:.3f}"
            self.bar.set_postfix(postfix)

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:
        if logs and "loss" in logs:
            self.loss = logs["loss"]

    def on_train_end(self, args, state, control, **kwargs) -> None:
        if self.bar is not None:
            self.bar.close()


class PretrainTrainer(Trainer):
    """The HF Trainer over an objective module that returns ``{"loss", <component>_loss ...}``.

    Checkpoints are safetensors of the whole objective (encoder, decoder layer; tied weights stored once).
    """

    def __init__(self, *args: Any, progress: ProgressBar, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.progress = progress
        self.components: dict[str, float] = {}
        self.component_steps = 0
        self.remove_callback(ProgressCallback)
        self.add_callback(progress)

    def compute_loss(self, model: nn.Module, inputs: dict[str, Any], return_outputs: bool = False, **kwargs: Any):
        outputs = model(**inputs)
        self.progress.tokens += int(inputs["attention_mask"].sum())
        for key, value in outputs.items():
            if key != "loss":
                self.components[key] = self.components.get(key, 0.0) + float(value)
        self.component_steps += 1
        return (outputs["loss"], outputs) if return_outputs else outputs["loss"]

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self.component_steps:
            logs.update({k: round(v / self.component_steps, 4) for k, v in self.components.items()})
            logs["tokens_per_second"] = round(self.progress.tokens_per_second(self.args.world_size), 1)
            self.components, self.component_steps = {}, 0
        super().log(logs, start_time)

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        output_dir = output_dir or self.args.output_dir
        if not self.args.should_save:
            return
        os.makedirs(output_dir, exist_ok=True)
        model = self.accelerator.unwrap_model(self.model, keep_torch_compile=False)
        safetensors.torch.save_model(model, os.path.join(output_dir, "model.safetensors"))
        if self.processing_class is not None:
            self.processing_class.save_pretrained(output_dir)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: nn.Module | None = None) -> None:
        weights = os.path.join(resume_from_checkpoint, "model.safetensors")
        if not os.path.isfile(weights):
            raise EmbedkitError("not a pretraining checkpoint (no model.safetensors)", path=resume_from_checkpoint)
        target = self.accelerator.unwrap_model(model or self.model, keep_torch_compile=False)
        safetensors.torch.load_model(target, weights, strict=True, device="cpu")


def build_objective(config: PretrainConfig, encoder: nn.Module) -> nn.Module:
    if config.objective == "mlm":
        return MaskedLM(encoder)
    if config.objective == "dupmae":
        return DupMAE(encoder, config.decoder, config.bow_weight)
    return RetroMAE(encoder, config.decoder)


def _number(value: float | None) -> str:
    return "not logged" if value is None else f"{value:.4f}"


def _dev_lines(curve: list[dict[str, float]]) -> list[str]:
    """The dev evaluation during pretraining, as a table of the card."""
    if not curve:
        return []
    metrics = [key for key in curve[0] if key != "step"]
    lines = ["", "Dev evaluation during pretraining (CLS pooling, exact search, trec_eval metrics):", ""]
    lines += ["| step | " + " | ".join(metrics) + " |", "| --- |" + " --- |" * len(metrics)]
    lines += [f"| {row['step']} | " + " | ".join(f"{row[m]:.4f}" for m in metrics) + " |" for row in curve]
    return lines


def _card(record: dict[str, Any]) -> str:
    config = record["config"]
    rows = [f"| {k} | `{v!r}` |" for k, v in config.items()]
    papers = {
        "retromae": "RetroMAE (Xiao et al., 2022)",
        "dupmae": "DupMAE (Xiao et al., 2023)",
        "mlm": "masked language modelling (Devlin et al., 2019)",
    }
    lines = [
        f"# {Path(config['output']).name}",
        "",
        "A BERT-like encoder after retrieval-oriented pretraining with embedkit. Load it with "
        '`embedkit.load_model(path, pooling="cls")`; fine-tune it with `embedkit train --model path`.',
        "",
        "## embedkit pretraining",
        "",
        f"- objective: {config['objective']}, {papers[config['objective']]}",
        f"- masks: {record['masks']}",
        f"- steps: {record['steps']}; batch size {config['batch_size']}; max length {config['max_length']}",
        f"- corpus: {record['corpus']}; {record['texts']} texts",
        f"- started from: {record['base_model']}" + (" (random init)" if config["model_config"] else ""),
        f"- wall time: {record['train_seconds']:.0f} s; {record['tokens_per_second']:.0f} tokens/s",
        f"- logged loss: first {_number(record['first_loss'])}, last {_number(record['last_loss'])}",
        *_dev_lines(record.get("dev_curve") or []),
        "",
        "| setting | value |",
        "| --- | --- |",
        *rows,
        "",
    ]
    return "\n".join(lines)


def pretrain(config: PretrainConfig, dataset: datasets.Dataset | None = None) -> Path:
    """Pretrain and save to ``config.output``; ``dataset`` (a ``datasets.Dataset`` with ``text``) replaces a path.

    Checkpoints go to ``OUTPUT.partial``; the finished encoder takes ``OUTPUT``'s place in one step (see
    ``embedkit.training.run_folder``).
    """
    config.check(has_dataset_object=dataset is not None)
    output = Path(config.output)
    args = TrainingArguments(
        **shared_training_arguments(config, partial_folder(output) / "checkpoints"), remove_unused_columns=False
    )
    main = args.process_index == 0
    with run_lock(output, main):
        with args.main_process_first(local=False, desc="preparing the output folder"):
            run = prepare_run(
                output,
                ENCODER_KIND,
                asdict(config),
                resume=config.resume,
                overwrite=config.overwrite,
                main=main,
            )
        if run is None:
            return output
        return _pretrain_run(config, run, args, dataset)


def _pretrain_run(
    config: PretrainConfig, run: TrainingRun, args: TrainingArguments, dataset: datasets.Dataset | None
) -> Path:
    encoder, tokenizer, base = load_encoder(config.model, config.model_config)
    texts, origin = load_texts(
        dataset if dataset is not None else (config.dataset or config.data), config.corpus_limit, config.data_dir
    )
    examples = tokenize(texts, tokenizer, config.max_length)
    idf = corpus_idf(examples, len(tokenizer)) if config.masking == "idf" else None
    collator = PretrainCollator(
        tokenizer,
        config.objective,
        Masker(config.masking, idf=idf),
        config.encoder_mask_ratio,
        config.decoder_mask_ratio,
        config.decoder,
        seed=config.seed + args.process_index,
    )
    progress = ProgressBar()
    trainer = PretrainTrainer(
        model=build_objective(config, encoder),
        args=args,
        train_dataset=examples,
        data_collator=collator,
        processing_class=tokenizer,
        progress=progress,
    )
    dev = None
    if config.dev_dataset:  # the encoder as it will be loaded (CLS pooling), scored on a dev set as it trains
        evaluator = RetrievalEvaluator.of(config.dev_dataset, config.dev_split, config.data_dir)
        every = config.eval_steps or config.save_steps
        dev = EncoderEvaluation(evaluator, encoder, tokenizer, "cls", config.max_length, every)
        trainer.add_callback(dev)
    result = trainer.train(resume_from_checkpoint=run.resume_from)
    if not trainer.is_world_process_zero():
        return run.output
    staging = run.fresh_staging()
    encoder.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    write_json(staging / "embedkit.json", {"pooling": "cls"})
    history = [row for row in trainer.state.log_history if "loss" in row]
    record: dict[str, Any] = {
        "format": f"embedkit.{ENCODER_KIND}/1",
        "config": asdict(config),
        "base_model": base,
        "corpus": origin,
        "texts": len(examples),
        "masks": config.masks(),
        "steps": trainer.state.global_step,
        "train_seconds": result.metrics.get("train_runtime", 0.0),
        "tokens_seen": progress.tokens * args.world_size,
        "tokens_per_second": progress.tokens_per_second(args.world_size),
        "train_loss": result.metrics.get("train_loss"),
        "first_loss": history[0]["loss"] if history else None,
        "last_loss": history[-1]["loss"] if history else None,
        "loss_history": history,
        "dev_curve": [] if dev is None else dev.history,
        "resumed_from": run.resume_from and Path(run.resume_from).name,
        "settings_changed_on_resume": run.changed_on_resume,
        "world_size": args.world_size,
        "library_versions": library_versions(),
    }
    write_json(staging / RECORD, record)
    write_text(staging / "README.md", _card(record))
    return run.commit()


def pretraining_record(folder: str | Path) -> dict[str, Any]:
    """The JSON record ``pretrain`` writes beside the encoder."""
    return read_json(Path(folder) / RECORD)
