"""The ``dupmae`` pooling: DupMAE's representation as a sentence-transformers module.

DupMAE (Xiao et al., 2023) represents a text by its sentence vector ([CLS], or the mean of the token vectors when
the encoder was pretrained with mean pooling: ``dense_pooling``) joined to its ordinary tokens' aggregated vector:
each ordinary token's hidden state goes through the MLM head into vocabulary space, log(1 + ReLU(.)) keeps the
positive evidence, and a max over positions gives one |V|-sized vector. That vector is reduced to ``reduced_dim``
values by taking the max over ``reduced_dim`` contiguous groups of vocabulary ids, a parameter-free reduction
(the paper reduces and aggregates before concatenating; it publishes no fixed recipe for a folder like this one,
so this choice is embedkit's). The module holds its own copy of the MLM head, saved with the model.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from sentence_transformers.base.modules import Module
from transformers import AutoConfig, BertConfig
from transformers.models.bert.modeling_bert import BertOnlyMLMHead

from embedkit.errors import EmbedkitError
from embedkit.models.pooling import SENTENCE_POOLINGS, sentence_vector


class DupMAEPooling(Module):
    config_keys: ClassVar[list[str]] = [
        "hidden_size",
        "vocab_size",
        "hidden_act",
        "layer_norm_eps",
        "reduced_dim",
        "dense_pooling",
    ]
    embedkit_pooling = "dupmae"

    def __init__(
        self,
        hidden_size: int,
        vocab_size: int,
        hidden_act: str = "gelu",
        layer_norm_eps: float = 1e-12,
        reduced_dim: int | None = None,
        dense_pooling: str = "cls",
    ) -> None:
        super().__init__()
        if dense_pooling not in SENTENCE_POOLINGS:
            raise EmbedkitError(f"dupmae pools its dense part with cls or mean, not '{dense_pooling}'", field="pooling")
        self.dense_pooling = dense_pooling
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        self.hidden_act = hidden_act
        self.layer_norm_eps = layer_norm_eps
        self.reduced_dim = reduced_dim or hidden_size
        config = BertConfig(
            hidden_size=hidden_size, vocab_size=vocab_size, hidden_act=hidden_act, layer_norm_eps=layer_norm_eps
        )
        self.head = BertOnlyMLMHead(config)

    @classmethod
    def from_folder(cls, path: str, reduced_dim: int | None = None, dense_pooling: str = "cls") -> DupMAEPooling:
        """Copy the MLM head of a pretrained folder (as ``embedkit pretrain`` writes it) into a new module."""
        from transformers import AutoModelForMaskedLM

        config = AutoConfig.from_pretrained(path)
        encoder = AutoModelForMaskedLM.from_pretrained(path)
        if not isinstance(getattr(encoder, "cls", None), BertOnlyMLMHead):
            raise EmbedkitError("dupmae pooling needs a BERT masked-LM head in the folder", path=path, field="pooling")
        module = cls(
            config.hidden_size, config.vocab_size, config.hidden_act, config.layer_norm_eps, reduced_dim, dense_pooling
        )
        module.head.load_state_dict(encoder.cls.state_dict())
        return module

    def get_embedding_dimension(self) -> int:
        return self.hidden_size + self.reduced_dim

    def token_vector(self, token_embeddings: torch.Tensor, ordinary: torch.Tensor) -> torch.Tensor:
        """max over ordinary positions of log(1 + ReLU(MLM logits)), one text at a time to bound memory."""
        rows = []
        for states, keep in zip(token_embeddings, ordinary):
            weights = torch.log1p(torch.relu(self.head(states[keep]).float()))
            rows.append(weights.amax(dim=0) if len(weights) else weights.new_zeros(self.vocab_size))
        return torch.stack(rows)

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        tokens = features["token_embeddings"]
        ordinary = features["attention_mask"].bool().clone()
        ordinary[:, 0] = False  # [CLS]
        lengths = features["attention_mask"].sum(dim=1)
        ordinary[torch.arange(len(tokens)), lengths - 1] = False  # [SEP]
        reduced = F.adaptive_max_pool1d(self.token_vector(tokens, ordinary)[:, None], self.reduced_dim)[:, 0]
        dense = sentence_vector(tokens, features["attention_mask"], self.dense_pooling)
        features["sentence_embedding"] = torch.cat([dense, reduced.to(tokens.dtype)], dim=-1)
        return features

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        os.makedirs(output_path, exist_ok=True)
        self.save_config(output_path)
        self.save_torch_weights(output_path, safe_serialization=safe_serialization)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", **kwargs: Any) -> DupMAEPooling:
        config = cls.load_config(model_name_or_path, subfolder=subfolder)
        module = cls(**config)
        cls.load_torch_weights(model_name_or_path, subfolder=subfolder, model=module)
        return module
