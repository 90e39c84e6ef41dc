"""Plain masked-language-model continued pretraining (BERT, Devlin et al., 2019; domain-adaptive pretraining,
Gururangan et al., 2020): the baseline every masked-autoencoder result is compared against."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn
from transformers import PreTrainedModel

from embedkit.pretrain.encoder import masked_lm_loss, mlm_head


class MaskedLM(nn.Module):
    """The encoder alone, predicting its masked tokens."""

    def __init__(self, encoder: PreTrainedModel) -> None:
        super().__init__()
        self.encoder = encoder

    @property
    def head(self) -> nn.Module:
        return mlm_head(self.encoder)

    def encoder_parameters(self) -> Iterator[nn.Parameter]:
        """The checkpoint's body (embeddings and layers, so the head's tied output matrix too): frozen in the
        head warm-up."""
        return self.encoder.base_model.parameters()

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        hidden = self.encoder.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        loss = masked_lm_loss(self.head, hidden, labels)
        return {"loss": loss, "encoder_loss": loss.detach()}
