"""The encoder every objective trains: a BERT-like masked-LM model, loaded from a checkpoint or built from a config.

A checkpoint without an MLM head (a sentence-embedding model such as all-MiniLM-L6-v2) gets a freshly initialised
one; its output projection is tied to the word embeddings as in BERT.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from embedkit.errors import EmbedkitError
from embedkit.models.reference import default_model_path


def load_encoder(
    model: str | None, model_config: str | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]:
    """The masked-LM encoder and its tokenizer; ``model_config`` (a folder with config and tokenizer) = random init."""
    source = model_config or model or str(default_model_path())
    path = Path(source).expanduser()
    if (model_config or path.exists()) and not (path / "config.json").is_file():
        raise EmbedkitError("not a transformers model folder (no config.json)", path=path, field="model")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        # transformers reports a newly initialised MLM head, at the verbosity its user chose
        if model_config:
            encoder = AutoModelForMaskedLM.from_config(AutoConfig.from_pretrained(source))
        else:
            encoder = AutoModelForMaskedLM.from_pretrained(source)
    except (OSError, ValueError) as err:
        raise EmbedkitError(f"cannot load a masked-LM model: {str(err).splitlines()[0]}", path=source) from None
    if tokenizer.mask_token_id is None:
        raise EmbedkitError("the tokenizer has no mask token", path=source, field="model")
    mlm_head(encoder)
    return encoder, tokenizer, source


def mlm_head(encoder: PreTrainedModel) -> nn.Module:
    """The module mapping hidden states to vocabulary logits (``cls`` in BERT, ``lm_head`` in RoBERTa-likes)."""
    for name in ("cls", "lm_head"):
        head = getattr(encoder, name, None)
        if isinstance(head, nn.Module):
            return head
    raise EmbedkitError(f"{type(encoder).__name__} has no BERT-like MLM head", field="model")


def masked_lm_loss(head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over the labelled positions only (the head runs on those rows, not the whole batch)."""
    selected = labels != -100
    if not bool(selected.any()):
        return hidden.sum() * 0.0
    return F.cross_entropy(head(hidden[selected]).float(), labels[selected])


def labelled_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over positions whose label is not -100, for callers that already hold every position's logits."""
    selected = labels != -100
    if not bool(selected.any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits[selected].float(), labels[selected])


def additive_mask(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean "may attend" mask as the additive float mask both eager and SDPA attention accept."""
    return (~visible).to(dtype) * torch.finfo(dtype).min
