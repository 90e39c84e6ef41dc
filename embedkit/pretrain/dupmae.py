"""DupMAE (Xiao et al., 2023, "RetroMAE-2: Duplex Masked Auto-Encoder For Pre-Training Retrieval-Oriented Language
Models"): RetroMAE's [CLS] reconstruction plus a bag-of-words task for the ordinary tokens.

The ordinary tokens' final hidden states go through the MLM head (the paper's linear projection unit) into
vocabulary space and are max-pooled over positions; a softmax of that vector must predict the input's bag of words
(the reference's target: 1 / n for each distinct token of a text of n ordinary tokens). The reference pools over every
position after [CLS], [SEP] included; here [SEP] is left out, as the ``dupmae`` pooling leaves it out when encoding.
The bag-of-words loss is weighted by ``bow_weight`` (0.1, the reference's default) and added to the decoder's and
the encoder's MLM losses. The representation it trains, the sentence vector joined to the reduced aggregated token
vector, is the output folder's ``dupmae`` pooling in ``embedkit.load_model`` (``embedkit/models/dupmae_pooling.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from embedkit.pretrain.encoder import labelled_cross_entropy
from embedkit.pretrain.retromae import RetroMAE


def bag_of_words_loss(logits: torch.Tensor, bag: torch.Tensor, ordinary: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of softmax(max over ordinary positions of ``logits``) against the weights ``bag``.

    ``logits`` (batch, length, vocab) are the MLM head's outputs; ``ordinary`` marks the non-special, non-padding
    positions that are pooled; ``bag`` (batch, vocab) is the collator's ``bag_of_words``.
    """
    pooled = logits.float().masked_fill(~ordinary[..., None], torch.finfo(torch.float32).min).amax(dim=1)
    return -(bag * F.log_softmax(pooled, dim=-1)).sum(dim=-1).mean()


class DupMAE(RetroMAE):
    def __init__(
        self, encoder: PreTrainedModel, decoder: str = "enhanced", bow_weight: float = 0.1, pooling: str = "cls"
    ) -> None:
        super().__init__(encoder, decoder, pooling)
        self.bow_weight = bow_weight

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        encoder_input_ids: torch.Tensor,
        encoder_labels: torch.Tensor,
        decoder_labels: torch.Tensor,
        bag_of_words: torch.Tensor,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        hidden = self.encode(encoder_input_ids, attention_mask)
        logits = self.head(hidden)
        encoder_loss = labelled_cross_entropy(logits, encoder_labels)  # all logits are needed for the bag anyway
        decoder_loss = self.reconstruction_loss(
            hidden, input_ids, attention_mask, decoder_labels, decoder_input_ids, decoder_attention
        )
        ordinary = bag_of_words.gather(1, input_ids) > 0  # the bag holds exactly the ordinary tokens
        bow_loss = bag_of_words_loss(logits, bag_of_words, ordinary)
        return {
            "loss": encoder_loss + decoder_loss + self.bow_weight * bow_loss,
            "encoder_loss": encoder_loss.detach(),
            "decoder_loss": decoder_loss.detach(),
            "bow_loss": bow_loss.detach(),
        }
