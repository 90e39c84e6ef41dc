"""``TrainConfig``: every knob of ``embedkit train``, loadable from YAML and recorded in the model card."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embedkit.errors import EmbedkitError
from embedkit.settings_file import from_yaml

OBJECTIVES = ("supervised", "simcse", "cropping")


def check_common(config: Any) -> None:
    """The checks ``TrainConfig`` and ``PretrainConfig`` share: steps, batch, learning rate, schedule."""
    if config.batch_size < 1:
        raise EmbedkitError(f"must be at least 1, not {config.batch_size}", field="batch_size")
    if config.epochs <= 0:
        raise EmbedkitError(f"must be > 0, not {config.epochs}", field="epochs")
    if config.max_steps != -1 and config.max_steps < 1:
        raise EmbedkitError(f"must be -1 (use epochs) or at least 1, not {config.max_steps}", field="max_steps")
    if config.learning_rate <= 0:
        raise EmbedkitError(f"must be > 0, not {config.learning_rate}", field="learning_rate")
    if not 0 <= config.warmup_ratio < 1:
        raise EmbedkitError(f"must be in [0, 1), not {config.warmup_ratio}", field="warmup_ratio")
    if config.save_steps < 1 or config.logging_steps < 1:
        raise EmbedkitError("save_steps and logging_steps must be at least 1", field="save_steps")


@dataclass
class TrainConfig:
    output: str
    model: str | None = None
    objective: str = "supervised"
    dataset: str | None = None  # BEIR folder or name: pairs from its qrels, or its corpus when unsupervised
    train_split: str = "train"
    data: str | None = None  # a JSONL of {"query", "positive", "negatives", "scores"} (e.g. from `embedkit mine`)
    num_negatives: int | None = None
    drop_short_examples: bool = False  # drop (and count) rows with fewer negatives instead of failing
    corpus_limit: int | None = None  # unsupervised: use the first N documents
    loss: str = "infonce"
    temperature: float = 0.05
    symmetric: bool = False
    learn_temperature: bool = False
    mini_batch_size: int | None = None  # GradCache when set
    matryoshka_dims: list[int] = field(default_factory=list)
    batch_size: int = 32
    epochs: float = 1.0
    max_steps: int = -1
    learning_rate: float = 2e-5
    scheduler: str = "linear"
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    seed: int = 42
    precision: str = "auto"  # auto | fp32 | bf16 | fp16
    max_length: int | None = None
    pooling: str | None = None
    eval_dataset: str | None = None
    eval_split: str = "test"
    save_steps: int = 500
    save_total_limit: int = 2
    logging_steps: int = 10
    resume: bool | None = None  # None: resume an unfinished run only if its settings are these; True: resume anyway
    overwrite: bool = False  # replace an earlier model or unfinished run in OUTPUT
    data_dir: str | None = None

    def check(self) -> None:
        if self.objective not in OBJECTIVES:
            raise EmbedkitError(f"unknown objective '{self.objective}' ({' | '.join(OBJECTIVES)})", field="objective")
        if self.objective == "supervised" and not (self.data or self.dataset):
            raise EmbedkitError("supervised training needs --data (JSONL) or --dataset (BEIR qrels)", field="data")
        if self.objective != "supervised" and not self.dataset:
            raise EmbedkitError(f"{self.objective} needs a corpus: --dataset", field="dataset")
        if self.precision not in ("auto", "fp32", "bf16", "fp16"):
            raise EmbedkitError(f"unknown precision '{self.precision}'", field="precision")
        if self.loss not in ("infonce", "distill"):
            raise EmbedkitError(f"unknown loss '{self.loss}' (infonce | distill)", field="loss")
        check_common(self)
        for name in ("temperature",):
            if getattr(self, name) <= 0:
                raise EmbedkitError(f"must be > 0, not {getattr(self, name)}", field=name)
        for name in ("num_negatives", "mini_batch_size", "max_length", "corpus_limit"):
            value = getattr(self, name)
            if value is not None and value < (0 if name == "num_negatives" else 1):
                raise EmbedkitError(f"must be at least {0 if name == 'num_negatives' else 1}, not {value}", field=name)

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> TrainConfig:
        return from_yaml(cls, path, **overrides)
