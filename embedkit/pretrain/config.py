"""``PretrainConfig``: every knob of ``embedkit pretrain``, loadable from YAML and recorded in the model card."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embedkit.errors import EmbedkitError
from embedkit.settings_file import from_yaml
from embedkit.train.config import check_common

OBJECTIVES = ("retromae", "dupmae", "mlm")
POLICIES = ("random", "whole_word", "span", "idf")
DECODERS = ("enhanced", "plain")


@dataclass
class PretrainConfig:
    output: str
    objective: str = "retromae"
    model: str | None = None  # a BERT-like checkpoint; None = the encoder of the packaged default model
    model_config: str | None = None  # a folder with config + tokenizer: start from random weights instead
    dataset: str | None = None  # BEIR folder or name: its corpus
    data: str | None = None  # JSONL ({"text"[, "title"]}), .txt (one text a line) or a datasets.save_to_disk folder
    corpus_limit: int | None = None  # use the first N texts
    max_length: int = 256
    masking: str = "whole_word"  # random | whole_word | span | idf
    encoder_mask_ratio: float = 0.3  # RetroMAE: 15-30 %
    decoder_mask_ratio: float = 0.5  # RetroMAE: 50-70 %
    decoder: str = "enhanced"  # enhanced | plain
    bow_weight: float = 1.0  # DupMAE's bag-of-words loss weight
    batch_size: int = 32
    epochs: float = 1.0
    max_steps: int = -1
    learning_rate: float = 1e-4
    scheduler: str = "linear"
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    seed: int = 42
    precision: str = "auto"  # auto | fp32 | bf16 | fp16
    save_steps: int = 500
    save_total_limit: int = 2
    logging_steps: int = 10
    resume: bool | None = None  # None: resume an unfinished run only if its settings are these; True: resume anyway
    overwrite: bool = False  # replace an earlier encoder or unfinished run in OUTPUT
    data_dir: str | None = None

    def check(self, has_dataset_object: bool = False) -> None:
        if self.objective not in OBJECTIVES:
            raise EmbedkitError(f"unknown objective '{self.objective}' ({' | '.join(OBJECTIVES)})", field="objective")
        if self.masking not in POLICIES:
            raise EmbedkitError(f"unknown masking '{self.masking}' ({' | '.join(POLICIES)})", field="masking")
        if self.decoder not in DECODERS:
            raise EmbedkitError(f"unknown decoder '{self.decoder}' ({' | '.join(DECODERS)})", field="decoder")
        for name in ("encoder_mask_ratio", "decoder_mask_ratio"):
            if not 0.0 < getattr(self, name) < 1.0:
                raise EmbedkitError(f"must lie between 0 and 1, got {getattr(self, name)}", field=name)
        if self.precision not in ("auto", "fp32", "bf16", "fp16"):
            raise EmbedkitError(f"unknown precision '{self.precision}'", field="precision")
        check_common(self)
        if self.max_length < 8:
            raise EmbedkitError("must be at least 8 tokens", field="max_length")
        sources = [s for s in (self.dataset, self.data) if s] + (["dataset object"] if has_dataset_object else [])
        if len(sources) != 1:
            raise EmbedkitError(
                "give exactly one corpus: --dataset (BEIR) or --data (JSONL, text, datasets folder)", field="dataset"
            )
        if self.model and self.model_config:
            raise EmbedkitError("give --model (a checkpoint) or --model-config (random init), not both", field="model")

    def masks(self) -> str:
        """The masking settings in words, for the card."""
        text = f"{self.masking}, encoder {self.encoder_mask_ratio:.0%}"
        if self.objective != "mlm":
            text += f", decoder {self.decoder_mask_ratio:.0%} ({self.decoder} decoding)"
        return text

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> PretrainConfig:
        return from_yaml(cls, path, **overrides)
