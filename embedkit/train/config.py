"""``TrainConfig``: every knob of ``embedkit train``, loadable from YAML and recorded in the model card."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embedkit.errors import EmbedkitError
from embedkit.settings_file import from_yaml

OBJECTIVES = ("supervised", "simcse", "cropping")


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
    resume: bool = True
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

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> TrainConfig:
        return from_yaml(cls, path, **overrides)
