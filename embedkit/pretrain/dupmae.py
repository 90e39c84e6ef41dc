"""DupMAE (Xiao et al., 2023, "RetroMAE-2: Duplex Masked Auto-Encoder For Pre-Training Retrieval-Oriented Language
Models"): RetroMAE's [CLS] reconstruction plus a bag-of-words task for the ordinary tokens.

The ordinary tokens' final hidden states go through the MLM head (the paper's linear projection unit) into
vocabulary space and are max-pooled over positions; a softmax of that vector must predict the input's bag of words
(a uniform distribution over its distinct ordinary tokens). The two decoding losses and the encoder's MLM loss are
added. The representation it trains, [CLS] joined to the reduced aggregated token vector, is the ``dupmae`` pooling
of ``embedkit.load_model`` (``embedkit/models/dupmae_pooling.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from embedkit.pretrain.encoder import labelled_cross_entropy
from embedkit.pretrain.retromae import RetroMAE


def bag_of_words_loss(logits: torch.Tensor, input_ids: torch.Tensor, ordinary: torch.Tensor) -> torch.Tensor:
    """Cross-entropy between softmax(max over ordinary positions of ``logits``) and the text's bag of words.

    ``logits`` (batch, length, vocab) are the MLM head's outputs; ``ordinary`` marks the non-special, non-padding
    positions, which are both pooled and counted in the bag.
    """
    pooled = logits.float().masked_fill(~ordinary[..., None], torch.finfo(torch.float32).min).amax(dim=1)
    bag = torch.zeros_like(pooled).scatter_(1, input_ids.masked_fill(~ordinary, 0), ordinary.float())
    bag = bag / bag.sum(dim=-1, keepdim=True).clamp(min=1.0)
    return -(bag * F.log_softmax(pooled, dim=-1)).sum(dim=-1).mean()


class DupMAE(RetroMAE):
    def __init__(self, encoder: PreTrainedModel, decoder: str = "enhanced", bow_weight: float = 1.0) -> None:
        super().__init__(encoder, decoder)
        self.bow_weight = bow_weight

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        encoder_input_ids: torch.Tensor,
        encoder_labels: torch.Tensor,
        decoder_labels: torch.Tensor,
        ordinary: torch.Tensor,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        hidden = self.encode(encoder_input_ids, attention_mask)
        logits = self.head(hidden)
        encoder_loss = labelled_cross_entropy(logits, encoder_labels)  # all logits are needed for the bag anyway
        decoder_loss = self.reconstruction_loss(
            hidden, input_ids, attention_mask, decoder_labels, decoder_input_ids, decoder_attention
        )
        bow_loss = bag_of_words_loss(logits, input_ids, ordinary.bool())
        return {
            "loss": encoder_loss + decoder_loss + self.bow_weight * bow_loss,
            "encoder_loss": encoder_loss.detach(),
            "decoder_loss": decoder_loss.detach(),
            "bow_loss": bow_loss.detach(),
        }
