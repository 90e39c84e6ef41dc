"""``TrainConfig``: every knob of ``embedkit train``, loadable from YAML and recorded in the model card."""

from __future__ import annotations

from dataclasses import dataclass, field

from embedkit.errors import EmbedkitError
from embedkit.training.config import RunConfig

OBJECTIVES = ("supervised", "simcse", "cropping")


@dataclass
class TrainConfig(RunConfig):
    """``dataset``: pairs from its qrels, or its corpus when unsupervised; ``data``: a JSONL of ``{"query",
    "positive", "negatives", "scores"}`` (e.g. from ``embedkit mine``)."""

    objective: str = "supervised"
    train_split: str = "train"
    num_negatives: int | None = None
    drop_short_examples: bool = False  # drop (and count) rows with fewer negatives instead of failing
    loss: str = "infonce"
    temperature: float = 0.05
    symmetric: bool = False
    learn_temperature: bool = False
    mini_batch_size: int | None = None  # GradCache when set
    matryoshka_dims: list[int] = field(default_factory=list)
    pooling: str | None = None
    eval_dataset: str | None = None  # evaluated once after training
    eval_split: str = "test"

    def check(self) -> None:
        if self.objective not in OBJECTIVES:
            raise EmbedkitError(f"unknown objective '{self.objective}' ({' | '.join(OBJECTIVES)})", field="objective")
        if self.objective == "supervised" and not (self.data or self.dataset):
            raise EmbedkitError("supervised training needs --data (JSONL) or --dataset (BEIR qrels)", field="data")
        if self.objective != "supervised" and not self.dataset:
            raise EmbedkitError(f"{self.objective} needs a corpus: --dataset", field="dataset")
        if self.loss not in ("infonce", "distill"):
            raise EmbedkitError(f"unknown loss '{self.loss}' (infonce | distill)", field="loss")
        super().check()
        if self.temperature <= 0:
            raise EmbedkitError(f"must be > 0, not {self.temperature}", field="temperature")
        if self.num_negatives is not None and self.num_negatives < 0:
            raise EmbedkitError(f"must be at least 0, not {self.num_negatives}", field="num_negatives")
        if self.mini_batch_size is not None and self.mini_batch_size < 1:
            raise EmbedkitError(f"must be at least 1, not {self.mini_batch_size}", field="mini_batch_size")
