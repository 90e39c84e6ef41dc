"""TSDAE (Wang et al., 2021, "TSDAE: Using Transformer-based Sequential Denoising Auto-Encoder for Unsupervised
Sentence Embedding Learning"): the encoder reads a text with most of its words deleted, and a decoder that sees
only the pooled sentence vector (through cross-attention) must rebuild the original text.

The loss is sentence-transformers' ``DenoisingAutoEncoderLoss``: its decoder is the checkpoint loaded as a causal
LM with cross-attention added, its weights tied to the encoder's. The sentence vector is the checkpoint's own pooling
(``sentence_pooling``) before any normalisation; the output folder is a sentence-transformers folder with that
pooling and, when ``normalize``, a ``Normalize`` module.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Normalize, Transformer
from sentence_transformers.losses import DenoisingAutoEncoderLoss
from sentence_transformers.sentence_transformer.modules import Pooling
from torch import nn
from transformers import PreTrainedTokenizerBase

from embedkit.errors import EmbedkitError
from embedkit.models.reference import default_model_path


class TSDAE(nn.Module):
    def __init__(self, model: str | None, pooling: str, max_length: int) -> None:
        super().__init__()
        path = Path(model or default_model_path()).expanduser()
        if not (path / "config.json").is_file():
            raise EmbedkitError("tsdae starts from a transformers model folder (no config.json)", path=path)
        try:  # transformers reports the decoder's new cross-attention and LM head at its own verbosity
            transformer = Transformer(str(path), max_seq_length=max_length)
            pooled = Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling)
            self.model = SentenceTransformer(modules=[transformer, pooled], device="cpu")
            self.loss = DenoisingAutoEncoderLoss(self.model, tie_encoder_decoder=True)
        except (OSError, ValueError) as err:
            raise EmbedkitError(f"cannot build the TSDAE decoder: {str(err).splitlines()[0]}", path=path) from None

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self.model.tokenizer

    @property
    def encoder(self) -> nn.Module:
        """The transformer whose pooled vector is the sentence embedding (what the dev evaluation encodes with)."""
        return self.model[0].auto_model

    def encoder_parameters(self) -> Iterator[nn.Parameter]:
        return self.model[0].parameters()

    def sentence_model(self, normalize: bool) -> SentenceTransformer:
        return SentenceTransformer(modules=[self.model[0], self.model[1], *([Normalize()] if normalize else [])])

    def forward(
        self,
        source_input_ids: torch.Tensor,
        source_attention_mask: torch.Tensor,
        target_input_ids: torch.Tensor,
        target_attention_mask: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        source = {"input_ids": source_input_ids, "attention_mask": source_attention_mask}
        target = {"input_ids": target_input_ids, "attention_mask": target_attention_mask}
        loss = self.loss([source, target], labels=None)
        return {"loss": loss, "decoder_loss": loss.detach()}
