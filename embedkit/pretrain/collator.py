"""Batches for each objective: pad, mask twice (encoder and decoder) with the configured policy, corrupt as BERT.

RetroMAE's enhanced decoding (Xiao et al., 2022, section 3.3) needs no corrupted decoder input: the content stream
is the original text, and masking happens in a per-position attention matrix where row ``i`` sees the [CLS] slot and
the positions a fresh decoder-ratio mask leaves visible, never ``i`` itself; every ordinary token is then predicted.
As the reference implementation does, each row takes one mask from a small pool drawn per text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from embedkit.pretrain.masking import Masker, corrupt


@dataclass
class PretrainCollator:
    tokenizer: PreTrainedTokenizerBase
    objective: str
    masker: Masker
    encoder_ratio: float
    decoder_ratio: float = 0.5
    decoder: str = "enhanced"
    seed: int = 0
    pool_size: int = 32
    rng: np.random.Generator = field(init=False, repr=False)
    generator: torch.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.generator = torch.Generator().manual_seed(self.seed)
        self.special = np.asarray(sorted(set(self.tokenizer.all_special_ids)), dtype=np.int64)

    def _pad(self, examples: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        length = max(len(e["input_ids"]) for e in examples)
        ids = np.full((len(examples), length), self.tokenizer.pad_token_id, dtype=np.int64)
        starts = np.ones((len(examples), length), dtype=np.int64)
        attention = np.zeros((len(examples), length), dtype=bool)
        for row, example in enumerate(examples):
            n = len(example["input_ids"])
            ids[row, :n] = example["input_ids"]
            starts[row, :n] = example.get("word_starts") or [1] * n
            attention[row, :n] = True
        return ids, starts, attention

    def masks(self, ids: np.ndarray, starts: np.ndarray, maskable: np.ndarray, ratio: float) -> np.ndarray:
        return np.stack([self.masker.select(i, s, m, ratio, self.rng) for i, s, m in zip(ids, starts, maskable)])

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        ids, starts, attention = self._pad(examples)
        maskable = attention & ~np.isin(ids, self.special)
        input_ids = torch.from_numpy(ids)
        encoder_mask = torch.from_numpy(self.masks(ids, starts, maskable, self.encoder_ratio))
        encoder_ids, encoder_labels = corrupt(
            input_ids, encoder_mask, self.tokenizer.mask_token_id, len(self.tokenizer), self.generator
        )
        attention_mask = torch.from_numpy(attention).long()
        if self.objective == "mlm":
            return {"input_ids": encoder_ids, "attention_mask": attention_mask, "labels": encoder_labels}
        batch = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "encoder_input_ids": encoder_ids,
            "encoder_labels": encoder_labels,
        }
        if self.objective == "dupmae":
            batch["ordinary"] = torch.from_numpy(maskable)
        if self.decoder == "plain":
            decoder_mask = torch.from_numpy(self.masks(ids, starts, maskable, self.decoder_ratio))
            decoder_ids, decoder_labels = corrupt(
                input_ids, decoder_mask, self.tokenizer.mask_token_id, len(self.tokenizer), self.generator
            )
            batch |= {"decoder_input_ids": decoder_ids, "decoder_labels": decoder_labels}
        else:
            batch["decoder_labels"] = torch.where(torch.from_numpy(maskable), input_ids, -100)
            batch["decoder_attention"] = torch.from_numpy(self.position_masks(ids, starts, maskable, attention))
        return batch

    def position_masks(
        self, ids: np.ndarray, starts: np.ndarray, maskable: np.ndarray, attention: np.ndarray
    ) -> np.ndarray:
        """(batch, length, length) booleans: what each decoder position may attend to in enhanced decoding."""
        batch, length = ids.shape
        visible = np.zeros((batch, length, length), dtype=bool)
        for b in range(batch):
            pool = np.stack(
                [
                    self.masker.select(ids[b], starts[b], maskable[b], self.decoder_ratio, self.rng)
                    for _ in range(min(self.pool_size, max(1, int(maskable[b].sum()))))
                ]
            )
            rows = pool[self.rng.integers(len(pool), size=length)]
            visible[b] = ~rows & attention[b][None, :]
        visible[:, :, 0] = True  # the [CLS] slot carries the sentence embedding: always visible
        diagonal = np.arange(length)
        visible[:, diagonal, diagonal] = False  # a position never sees itself
        return visible
