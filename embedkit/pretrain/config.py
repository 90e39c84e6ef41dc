"""``PretrainConfig``: every knob of ``embedkit pretrain``, loadable from YAML and recorded in the model card."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from embedkit.errors import EmbedkitError
from embedkit.models.pooling import SENTENCE_POOLINGS
from embedkit.models.reference import default_model_path, folder_hint
from embedkit.storage import read_json
from embedkit.training.config import MAX_STEPS, RunConfig
from embedkit.validation import check_number

OBJECTIVES = ("retromae", "dupmae", "mlm", "tsdae")
POLICIES = ("random", "whole_word", "span", "idf")
DECODERS = ("enhanced", "plain")
CONTINUED_LEARNING_RATE = 2e-5  # continued pretraining of an embedder, as FlagEmbedding's examples use
FROM_SCRATCH_LEARNING_RATE = 1e-4  # BERT and RetroMAE recipes from random weights
HEAD_WARMUP_STEPS = 25


@dataclass
class PretrainConfig(RunConfig):
    """``model``: a BERT-like checkpoint (None: the encoder of the packaged default model); ``dataset``: a BEIR
    corpus; ``data``: JSONL (``{"text"[, "title"]}``), .txt (one text a line) or a ``datasets.save_to_disk``
    folder.

    Settings left as ``None`` are resolved when the config is made, so the record holds what ran: the learning rate
    (2e-5 from a checkpoint, 1e-4 from random weights), the head warm-up (25 steps from a checkpoint, none from random
    weights), the overlap of the windows long texts are cut into (a quarter of ``max_length``), and the sentence
    pooling and normalisation (the checkpoint's own when it is a sentence-transformers model, else CLS and none) that
    the decoder is conditioned on and the output folder is loaded with.
    """

    objective: str = "retromae"
    model_config: str | None = None  # a folder with config + tokenizer: start from random weights instead
    max_length: int | None = 256
    truncate: bool = False  # cut long texts after max_length tokens instead of windowing them
    chunk_overlap: int | None = None  # tokens shared by consecutive windows (default: a quarter of max_length)
    masking: str = "whole_word"  # random | whole_word | span | idf
    encoder_mask_ratio: float = 0.3  # RetroMAE: 15-30 %
    decoder_mask_ratio: float = 0.5  # RetroMAE: 50-70 %
    decoder: str = "enhanced"  # enhanced | plain
    bow_weight: float = 0.1  # DupMAE's bag-of-words loss weight (the reference's bow_loss_weight)
    deletion_ratio: float = 0.6  # TSDAE: the share of words deleted from the encoder's input
    sentence_pooling: str | None = None  # cls | mean: the vector the decoder is conditioned on
    normalize: bool | None = None  # whether the output folder's vectors are normalised when loaded
    head_warmup_steps: int | None = None  # first steps train only the head and decoder (the encoder frozen)
    head_learning_rate: float = 1e-4  # the head's and decoder's learning rate (the encoder's is learning_rate)
    learning_rate: float | None = None

    def __post_init__(self) -> None:
        scratch = bool(self.model_config)
        if self.learning_rate is None:
            self.learning_rate = FROM_SCRATCH_LEARNING_RATE if scratch else CONTINUED_LEARNING_RATE
        if self.head_warmup_steps is None:
            self.head_warmup_steps = 0 if scratch else HEAD_WARMUP_STEPS
        if self.chunk_overlap is None and not self.truncate and self.max_length:
            self.chunk_overlap = self.max_length // 4
        if self.sentence_pooling is None or self.normalize is None:
            pooling, normalize = checkpoint_pooling(self.model_config or self.model or default_model_path())
            self.sentence_pooling = self.sentence_pooling or pooling
            self.normalize = normalize if self.normalize is None else self.normalize

    def check(self, has_dataset_object: bool = False) -> None:
        if self.objective not in OBJECTIVES:
            raise EmbedkitError(f"unknown objective '{self.objective}' ({' | '.join(OBJECTIVES)})", field="objective")
        if self.masking not in POLICIES:
            raise EmbedkitError(f"unknown masking '{self.masking}' ({' | '.join(POLICIES)})", field="masking")
        if self.decoder not in DECODERS:
            raise EmbedkitError(f"unknown decoder '{self.decoder}' ({' | '.join(DECODERS)})", field="decoder")
        if self.sentence_pooling is not None and self.sentence_pooling not in SENTENCE_POOLINGS:
            choices = " | ".join(SENTENCE_POOLINGS)
            raise EmbedkitError(
                f"unknown sentence pooling '{self.sentence_pooling}' ({choices})", field="sentence_pooling"
            )
        for name in ("encoder_mask_ratio", "decoder_mask_ratio", "deletion_ratio"):
            check_number(getattr(self, name), name)
            if not 0.0 < getattr(self, name) < 1.0:
                raise EmbedkitError(f"must lie between 0 and 1, got {getattr(self, name)}", field=name)
        super().check()
        if self.max_length is None or self.max_length < 8:  # past the encoder's positions: refused once it loads
            raise EmbedkitError("must be at least 8 tokens", field="max_length")
        check_number(self.chunk_overlap, "chunk_overlap")
        check_number(self.head_warmup_steps, "head_warmup_steps", maximum=MAX_STEPS)
        check_number(self.head_learning_rate, "head_learning_rate", maximum=1.0)
        check_number(self.bow_weight, "bow_weight", maximum=1000.0)
        if self.truncate and self.chunk_overlap is not None:
            raise EmbedkitError("truncated texts have no windows to overlap: drop one", field="chunk_overlap")
        if self.chunk_overlap is not None and not 0 <= self.chunk_overlap <= self.max_length // 2:
            raise EmbedkitError(
                f"must lie between 0 and half of max_length ({self.max_length // 2}), not {self.chunk_overlap}",
                field="chunk_overlap",
            )
        if self.head_warmup_steps < 0:
            raise EmbedkitError(f"must be at least 0, not {self.head_warmup_steps}", field="head_warmup_steps")
        for name in ("head_learning_rate", "bow_weight"):
            if getattr(self, name) <= 0:
                raise EmbedkitError(f"must be > 0, not {getattr(self, name)}", field=name)
        sources = [s for s in (self.dataset, self.data) if s] + (["dataset object"] if has_dataset_object else [])
        if len(sources) != 1:
            raise EmbedkitError(
                "give exactly one corpus: --dataset (BEIR) or --data (JSONL, text, datasets folder)", field="dataset"
            )
        if self.model and self.model_config:
            raise EmbedkitError("give --model (a checkpoint) or --model-config (random init), not both", field="model")
        if self.objective == "tsdae" and self.model_config:
            raise EmbedkitError("tsdae ties its decoder to a checkpoint's weights: give --model", field="model_config")

    def masks(self) -> str:
        """The masking settings in words, for the card."""
        if self.objective == "tsdae":
            return f"{self.deletion_ratio:.0%} of words deleted from the encoder's input"
        text = f"{self.masking}, encoder {self.encoder_mask_ratio:.0%}"
        if self.objective != "mlm":
            text += f", decoder {self.decoder_mask_ratio:.0%} ({self.decoder} decoding)"
        return text


def checkpoint_pooling(source: str | Path) -> tuple[str, bool]:
    """The sentence pooling (cls | mean) and normalisation a checkpoint is used with, read from its files alone (no
    torch): a sentence-transformers folder's Pooling and Normalize modules, an ``embedkit pretrain`` folder's
    ``embedkit.json``, else CLS without normalisation (a plain BERT, or a Hub name)."""
    folder = Path(source).expanduser()
    if (folder / "modules.json").is_file():
        modules = [m for m in read_json(folder / "modules.json") if isinstance(m, dict)]
        pooling = "cls"
        for module in modules:
            if str(module.get("type", "")).endswith(".Pooling"):
                config = read_json(folder / str(module.get("path", "")) / "config.json")
                pooling = "mean" if isinstance(config, dict) and config.get("pooling_mode_mean_tokens") else "cls"
        return pooling, any(str(m.get("type", "")).endswith(".Normalize") for m in modules)
    hint = folder_hint(folder)
    pooling = hint.get("sentence_pooling") or hint.get("pooling")
    return (pooling if pooling in SENTENCE_POOLINGS else "cls"), bool(hint.get("normalize"))
