"""RetroMAE (Xiao et al., 2022, "RetroMAE: Pre-Training Retrieval-oriented Language Models Via Masked Auto-Encoder").

The text is masked twice. The full encoder reads the moderately masked copy and keeps its own MLM loss; its [CLS]
vector (or the mean of its token vectors: ``pooling``, as the encoder is used) is the sentence embedding. A decoder
of exactly one transformer layer (a ``BertLayer``) must rebuild the text from that one vector plus an aggressively
masked copy, so the embedding has to carry what the decoder cannot see.

- ``plain`` decoding: the decoder input is [embedding; decoder-masked token embeddings] with ordinary
  self-attention, and the MLM loss is taken on the decoder-masked positions.
- ``enhanced`` decoding (the paper's section 3.3): two streams. The query stream is the embedding plus each
  position's position embedding; the content stream is [embedding; the original token embeddings]. Each query
  position attends, through a position-specific mask, to the [CLS] slot and a random sample of other positions,
  never itself, and every ordinary token is predicted.

The decoder shares the encoder's embedding layer and MLM head, as the reference implementation does.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.models.bert.modeling_bert import BertLayer

from embedkit.models.pooling import SENTENCE_POOLINGS, sentence_vector
from embedkit.pretrain.config import DECODERS
from embedkit.pretrain.encoder import additive_mask, masked_lm_loss, mlm_head


class RetroMAE(nn.Module):
    def __init__(self, encoder: PreTrainedModel, decoder: str = "enhanced", pooling: str = "cls") -> None:
        super().__init__()
        if decoder not in DECODERS:
            raise ValueError(f"unknown decoder '{decoder}'")
        if pooling not in SENTENCE_POOLINGS:
            raise ValueError(f"unknown sentence pooling '{pooling}'")
        self.encoder = encoder
        self.decoding = decoder
        self.pooling = pooling
        config = copy.deepcopy(encoder.config)
        config.is_decoder = False
        config.add_cross_attention = False
        self.decoder = BertLayer(config)
        self.decoder.apply(encoder._init_weights)

    @property
    def head(self) -> nn.Module:
        return mlm_head(self.encoder)

    def encoder_parameters(self) -> Iterator[nn.Parameter]:
        """The checkpoint's body (embeddings and layers, so the head's tied output matrix too): frozen in the
        head warm-up."""
        return self.encoder.base_model.parameters()

    @property
    def embeddings(self) -> nn.Module:
        return self.encoder.base_model.embeddings

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def decode_plain(
        self, embedding: torch.Tensor, decoder_input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> torch.Tensor:
        tokens = self.embeddings(input_ids=decoder_input_ids)
        states = torch.cat([embedding[:, None], tokens[:, 1:]], dim=1)
        return self.decoder(states, additive_mask(attention_mask[:, None, None, :].bool(), states.dtype))

    def decode_enhanced(self, embedding: torch.Tensor, input_ids: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        batch, length = input_ids.shape
        content = torch.cat([embedding[:, None], self.embeddings(input_ids=input_ids)[:, 1:]], dim=1)
        query = self.embeddings(inputs_embeds=embedding[:, None].expand(batch, length, -1))
        attention = self.decoder.attention.self

        def heads(states: torch.Tensor) -> torch.Tensor:
            return states.view(batch, length, -1, attention.attention_head_size).transpose(1, 2)

        context = F.scaled_dot_product_attention(
            heads(attention.query(query)),
            heads(attention.key(content)),
            heads(attention.value(content)),
            attn_mask=additive_mask(visible[:, None], query.dtype),
            dropout_p=attention.dropout.p if self.training else 0.0,
        )
        context = context.transpose(1, 2).reshape(batch, length, -1)
        return self.decoder.feed_forward_chunk(self.decoder.attention.output(context, query))

    def sentence_embedding(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return sentence_vector(hidden, attention_mask, self.pooling)

    def reconstruction_loss(
        self,
        hidden: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        decoder_labels: torch.Tensor,
        decoder_input_ids: torch.Tensor | None,
        decoder_attention: torch.Tensor | None,
    ) -> torch.Tensor:
        embedding = self.sentence_embedding(hidden, attention_mask)
        if self.decoding == "plain":
            decoded = self.decode_plain(embedding, decoder_input_ids, attention_mask)
        else:
            decoded = self.decode_enhanced(embedding, input_ids, decoder_attention)
        return masked_lm_loss(self.head, decoded, decoder_labels)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        encoder_input_ids: torch.Tensor,
        encoder_labels: torch.Tensor,
        decoder_labels: torch.Tensor,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        hidden = self.encode(encoder_input_ids, attention_mask)
        encoder_loss = masked_lm_loss(self.head, hidden, encoder_labels)
        decoder_loss = self.reconstruction_loss(
            hidden, input_ids, attention_mask, decoder_labels, decoder_input_ids, decoder_attention
        )
        return {
            "loss": encoder_loss + decoder_loss,
            "encoder_loss": encoder_loss.detach(),
            "decoder_loss": decoder_loss.detach(),
        }
