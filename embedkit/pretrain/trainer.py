"""``pretrain``: a PretrainConfig to an encoder folder, through a thin subclass of the Hugging Face Trainer
(checkpoints and resume, seed, bf16 where supported, ``torchrun`` DDP with gloo on CPUs all come with it).

The folder is a plain transformers folder (config, safetensors, tokenizer; the masked-LM model, so its MLM head stays
for further pretraining) with an ``embedkit.json`` of the pooling and normalisation it is used with (the checkpoint's
own unless set; ``dupmae`` for DupMAE, its duplex representation), or for TSDAE a sentence-transformers folder, and a
README card; ``embedkit.load_model`` loads either and ``embedkit train --model FOLDER`` fine-tunes it.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import datasets
import safetensors.torch
import torch
from torch import nn
from transformers import PreTrainedTokenizerBase, Trainer, TrainingArguments, set_seed
from transformers.trainer_callback import ProgressCallback

from embedkit.environment import library_versions
from embedkit.errors import EmbedkitError
from embedkit.models.options import check_max_length, longest_input
from embedkit.pretrain.callbacks import HeadWarmup, ProgressBar
from embedkit.pretrain.card import card
from embedkit.pretrain.collator import PretrainCollator
from embedkit.pretrain.config import PretrainConfig
from embedkit.pretrain.data import corpus_idf, load_texts, tokenize
from embedkit.pretrain.dupmae import DupMAE
from embedkit.pretrain.encoder import load_encoder
from embedkit.pretrain.masking import Masker
from embedkit.pretrain.mlm import MaskedLM
from embedkit.pretrain.retromae import RetroMAE
from embedkit.pretrain.tsdae import TSDAE
from embedkit.storage import read_json, write_json, write_text
from embedkit.training.arguments import shared_training_arguments
from embedkit.training.evaluator import EncoderEvaluation, RetrievalEvaluator
from embedkit.training.run_folder import (
    ENCODER_KIND,
    RECORDS,
    TrainingRun,
    locked_run,
    partial_folder,
    prepare_run,
)
from embedkit.training.transfer import curve_of_histories, transfer_evaluators, transfer_record, transfer_scores

RECORD = RECORDS[ENCODER_KIND]


class PretrainTrainer(Trainer):
    """The HF Trainer over an objective module that returns ``{"loss", <component>_loss ...}``.

    Checkpoints are safetensors of the whole objective (encoder, decoder layer; tied weights stored once).
    """

    def __init__(self, *args: Any, progress: ProgressBar, head_learning_rate: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.progress = progress
        self.head_learning_rate = head_learning_rate
        self.components: dict[str, float] = {}
        self.component_steps = 0
        self.remove_callback(ProgressCallback)
        self.add_callback(progress)

    def create_optimizer(self, model: nn.Module | None = None) -> torch.optim.Optimizer:
        """The Trainer's optimizer with the encoder at ``learning_rate`` and the head and decoder (parameters new to
        the checkpoint, or not part of its body) at ``head_learning_rate``; the schedule scales both."""
        if self.optimizer is None:
            model = model if model is not None else self.model
            decay = set(self.get_decay_parameter_names(model))
            body = {id(p) for p in model.encoder_parameters()}
            groups = []
            for in_body, rate in ((True, self.args.learning_rate), (False, self.head_learning_rate)):
                for decayed in (True, False):
                    params = [
                        p
                        for name, p in model.named_parameters()
                        if (id(p) in body) == in_body and (name in decay) == decayed and p.requires_grad
                    ]
                    if params:
                        weight_decay = self.args.weight_decay if decayed else 0.0
                        groups.append({"params": params, "lr": rate, "weight_decay": weight_decay})
            optimizer_class, kwargs = self.get_optimizer_cls_and_kwargs(self.args, model)
            self.optimizer = optimizer_class(groups, **kwargs)
        return self.optimizer

    def compute_loss(self, model: nn.Module, inputs: dict[str, Any], return_outputs: bool = False, **kwargs: Any):
        outputs = model(**inputs)
        mask = inputs["attention_mask"] if "attention_mask" in inputs else inputs["target_attention_mask"]
        self.progress.tokens += int(mask.sum())
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


def build_objective(config: PretrainConfig) -> tuple[nn.Module, PreTrainedTokenizerBase, str]:
    """The objective module (which holds the encoder), its tokenizer, and where the encoder came from."""
    if config.objective == "tsdae":
        objective = TSDAE(config.model, config.sentence_pooling, config.max_length)
        return objective, objective.tokenizer, str(config.model or "the packaged default model")
    encoder, tokenizer, base = load_encoder(config.model, config.model_config)
    if config.objective == "mlm":
        return MaskedLM(encoder), tokenizer, base
    if config.objective == "dupmae":
        return DupMAE(encoder, config.decoder, config.bow_weight, config.sentence_pooling), tokenizer, base
    return RetroMAE(encoder, config.decoder, config.sentence_pooling), tokenizer, base


def save_encoder(
    objective: nn.Module, tokenizer: PreTrainedTokenizerBase, config: PretrainConfig, folder: Path
) -> None:
    """The encoder as it is used: pooled and normalised as the config says (see the module docstring)."""
    if isinstance(objective, TSDAE):
        objective.sentence_model(config.normalize).save(str(folder))
        return
    objective.encoder.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    pooling = "dupmae" if config.objective == "dupmae" else config.sentence_pooling
    hint = {"pooling": pooling, "sentence_pooling": config.sentence_pooling, "normalize": config.normalize}
    write_json(folder / "embedkit.json", hint)


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
    with locked_run(output, main) as made:
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
        made.append(run)
        return _pretrain_run(config, run, args, dataset)


def _pretrain_run(
    config: PretrainConfig, run: TrainingRun, args: TrainingArguments, dataset: datasets.Dataset | None
) -> Path:
    set_seed(config.seed)  # a new head or decoder starts from the same weights whatever ran before in this process
    objective, tokenizer, base = build_objective(config)
    check_max_length(config.max_length, longest_input(objective.encoder.config), path=base)
    texts, origin = load_texts(
        dataset if dataset is not None else (config.dataset or config.data), config.corpus_limit, config.data_dir
    )
    examples = tokenize(texts, tokenizer, config.max_length, config.chunk_overlap)
    idf = corpus_idf(examples, len(tokenizer)) if config.masking == "idf" else None
    collator = PretrainCollator(
        tokenizer,
        config.objective,
        Masker(config.masking, idf=idf),
        config.encoder_mask_ratio,
        config.decoder_mask_ratio,
        config.decoder,
        seed=config.seed + args.process_index,
        deletion_ratio=config.deletion_ratio,
        max_length=config.max_length,
    )
    progress = ProgressBar()
    trainer = PretrainTrainer(
        model=objective,
        args=args,
        train_dataset=examples,
        data_collator=collator,
        processing_class=tokenizer,
        progress=progress,
        head_learning_rate=config.head_learning_rate,
    )
    if config.head_warmup_steps:
        trainer.add_callback(HeadWarmup(objective.encoder_parameters(), config.head_warmup_steps))
    dev, every = None, config.eval_steps or config.save_steps
    if config.dev_dataset:  # the encoder as it will be loaded (its sentence pooling), scored on a dev set as it trains
        evaluator = RetrievalEvaluator.of(config.dev_dataset, config.dev_split, config.data_dir)
        dev = EncoderEvaluation(
            evaluator, objective.encoder, tokenizer, config.sentence_pooling, config.max_length, every, config.normalize
        )
        trainer.add_callback(dev)
    watchers = [
        EncoderEvaluation(
            watch, objective.encoder, tokenizer, config.sentence_pooling, config.max_length, every, config.normalize
        )
        for watch in transfer_evaluators(config.transfer_datasets, config.transfer_split, config.data_dir)
    ]
    by_name = {watcher.evaluator.name: watcher for watcher in watchers}
    base_transfer = transfer_scores([w.evaluator for w in watchers], lambda e: by_name[e.name].score())
    for watcher in watchers:
        trainer.add_callback(watcher)
    result = trainer.train(resume_from_checkpoint=run.resume_from)
    if not trainer.is_world_process_zero():
        return run.output
    staging = run.fresh_staging()
    save_encoder(objective, tokenizer, config, staging)
    history = [row for row in trainer.state.log_history if "loss" in row]
    record: dict[str, Any] = {
        "format": f"embedkit.{ENCODER_KIND}/1",
        "config": asdict(config),
        "base_model": base,
        "corpus": origin,
        "texts": len(texts),
        "chunks": len(examples),
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
        "transfer": transfer_record(
            config.transfer_split,
            base_transfer,
            curve_of_histories(watchers),
            transfer_scores([w.evaluator for w in watchers], lambda e: by_name[e.name].score()),
        )
        if watchers
        else None,
        "resumed_from": run.resume_from and Path(run.resume_from).name,
        "settings_changed_on_resume": run.changed_on_resume,
        "world_size": args.world_size,
        "library_versions": library_versions(),
    }
    write_json(staging / RECORD, record)
    write_text(staging / "README.md", card(record))
    return run.commit()


def pretraining_record(folder: str | Path) -> dict[str, Any]:
    """The JSON record ``pretrain`` writes beside the encoder."""
    return read_json(Path(folder) / RECORD)
