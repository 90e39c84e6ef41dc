"""``PretrainConfig``: every knob of ``embedkit pretrain``, loadable from YAML and recorded in the model card."""

from __future__ import annotations

from dataclasses import dataclass

from embedkit.errors import EmbedkitError
from embedkit.training.config import RunConfig

OBJECTIVES = ("retromae", "dupmae", "mlm")
POLICIES = ("random", "whole_word", "span", "idf")
DECODERS = ("enhanced", "plain")


@dataclass
class PretrainConfig(RunConfig):
    """``model``: a BERT-like checkpoint (None: the encoder of the packaged default model); ``dataset``: a BEIR
    corpus; ``data``: JSONL (``{"text"[, "title"]}``), .txt (one text a line) or a ``datasets.save_to_disk``
    folder."""

    objective: str = "retromae"
    model_config: str | None = None  # a folder with config + tokenizer: start from random weights instead
    max_length: int | None = 256
    masking: str = "whole_word"  # random | whole_word | span | idf
    encoder_mask_ratio: float = 0.3  # RetroMAE: 15-30 %
    decoder_mask_ratio: float = 0.5  # RetroMAE: 50-70 %
    decoder: str = "enhanced"  # enhanced | plain
    bow_weight: float = 1.0  # DupMAE's bag-of-words loss weight
    learning_rate: float = 1e-4

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
        super().check()
        if self.max_length is None or self.max_length < 8:
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
