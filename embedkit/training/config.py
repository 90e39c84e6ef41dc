"""``RunConfig``: the settings every training run shares, loadable from YAML and recorded with the model.

``TrainConfig`` and ``PretrainConfig`` extend it; the CLI options of the shared fields are declared once
(``embedkit.cli.options``) and the YAML keys are the field names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from embedkit.errors import EmbedkitError
from embedkit.settings_file import from_yaml
from embedkit.validation import check_number

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
MAX_BATCH_SIZE = 1_000_000
MAX_STEPS = 1_000_000_000
MAX_EPOCHS = 100_000
MAX_LENGTH = 1_000_000
MAX_SEED = 2**32 - 1  # numpy's legacy seeding, which the Trainer's set_seed uses, takes no more
Config = TypeVar("Config", bound="RunConfig")


def collection_name(dataset: str) -> str:
    """The name a transfer collection is recorded under: a BEIR name, or a folder's last part."""
    return Path(str(dataset).rstrip("/")).name


def check_transfer(datasets: Sequence[Any], option: str = "transfer_datasets") -> None:
    """Non-empty names, no collection twice (they are recorded by name)."""
    seen: set[str] = set()
    for i, dataset in enumerate(datasets):
        if not isinstance(dataset, str) or not dataset.strip():
            raise EmbedkitError(f"expected a BEIR dataset name or folder, not {dataset!r}", field=f"{option}[{i}]")
        name = collection_name(dataset)
        if name in seen:
            raise EmbedkitError(f"two transfer collections are both named '{name}'", field=f"{option}[{i}]")
        seen.add(name)


@dataclass
class RunConfig:
    output: str
    model: str | None = None
    dataset: str | None = None  # BEIR folder or name
    data: str | None = None  # a file of examples or texts instead of a dataset
    corpus_limit: int | None = None  # use the first N documents or texts
    max_length: int | None = None  # tokens per text
    batch_size: int = 32
    epochs: float = 1.0
    max_steps: int = -1
    learning_rate: float = 2e-5
    scheduler: str = "linear"
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    seed: int = 42
    precision: str = "auto"  # auto | fp32 | bf16 | fp16
    save_steps: int = 500
    save_total_limit: int = 2
    logging_steps: int = 10
    dev_dataset: str | None = None  # BEIR folder or name evaluated during training (nDCG@10 and more)
    dev_split: str = "dev"
    eval_steps: int | None = None  # evaluate on the dev set every N steps (default: save_steps)
    transfer_datasets: list[str] = field(default_factory=list)  # BEIR collections watched, never trained on
    transfer_split: str = "test"
    resume: bool | None = None  # None: resume an unfinished run only if its settings are these; True: resume anyway
    overwrite: bool = False  # replace an earlier output or unfinished run in OUTPUT
    data_dir: str | None = None

    def check(self) -> None:
        """The checks every run shares: steps, batch, learning rate, schedule, precision."""
        if self.precision not in PRECISIONS:
            raise EmbedkitError(f"unknown precision '{self.precision}' ({' | '.join(PRECISIONS)})", field="precision")
        # NaN and infinity by name; the upper bounds refuse what could only exhaust memory or never end
        check_number(self.batch_size, "batch_size", minimum=1, maximum=MAX_BATCH_SIZE)
        for name in ("save_steps", "logging_steps", "save_total_limit", "corpus_limit", "eval_steps"):
            check_number(getattr(self, name), name, minimum=1, maximum=MAX_STEPS)
        check_number(self.max_length, "max_length", minimum=1, maximum=MAX_LENGTH)  # the model's own bound on load
        check_number(self.epochs, "epochs", maximum=MAX_EPOCHS)
        if self.epochs <= 0:
            raise EmbedkitError(f"must be > 0, not {self.epochs}", field="epochs")
        check_number(self.max_steps, "max_steps", maximum=MAX_STEPS)
        if self.max_steps != -1 and self.max_steps < 1:
            raise EmbedkitError(f"must be -1 (use epochs) or at least 1, not {self.max_steps}", field="max_steps")
        check_number(self.learning_rate, "learning_rate", maximum=1.0)
        if self.learning_rate <= 0:
            raise EmbedkitError(f"must be > 0, not {self.learning_rate}", field="learning_rate")
        check_number(self.warmup_ratio, "warmup_ratio", minimum=0)
        if self.warmup_ratio >= 1:
            raise EmbedkitError(f"must be in [0, 1), not {self.warmup_ratio}", field="warmup_ratio")
        check_number(self.weight_decay, "weight_decay", minimum=0, maximum=1.0)
        check_number(self.seed, "seed", minimum=0, maximum=MAX_SEED)
        if self.eval_steps is not None and not (self.has_dev_set or self.transfer_datasets):
            raise EmbedkitError(
                "evaluating during training needs a dev set (--dev-dataset) or --transfer-dataset", field="eval_steps"
            )
        check_transfer(self.transfer_datasets)

    @property
    def has_dev_set(self) -> bool:
        return bool(self.dev_dataset)

    @classmethod
    def from_yaml(cls: type[Config], path: str | Path, **overrides: Any) -> Config:
        return from_yaml(cls, path, **overrides)
