"""Batches for each objective: pad, mask twice (encoder and decoder) with the configured policy, corrupt as BERT.

RetroMAE's enhanced decoding (Xiao et al., 2022, section 3.3) needs no corrupted decoder input: the content stream
is the original text, and masking happens in a per-position attention matrix where row ``i`` sees the [CLS] slot and
the positions a fresh decoder-ratio mask leaves visible, never ``i`` itself; every ordinary token is then predicted.
Each row draws its own mask (the reference draws one per row from a pool of as many masks as the text has tokens).

The masks of a batch are drawn from a generator seeded by the run's seed and the batch's example numbers, so a
resumed run masks the batches it has not seen yet exactly as an uninterrupted run would.

TSDAE (Wang et al., 2021) batches are the text with ``deletion_ratio`` of its words deleted (the encoder's input)
and the text itself (the decoder's target), both tokenised by the model's tokenizer.
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
    deletion_ratio: float = 0.6
    max_length: int = 512
    rng: np.random.Generator = field(init=False, repr=False)
    generator: torch.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.reseed([])
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

    def reseed(self, examples: list[dict[str, Any]]) -> None:
        """The batch's generators, from the seed and the examples' numbers (``example``) alone."""
        self.rng = np.random.default_rng([self.seed, *(int(e.get("example", 0)) for e in examples)])
        self.generator = torch.Generator().manual_seed(int(self.rng.integers(2**62)))

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        self.reseed(examples)
        if self.objective == "tsdae":
            return self.denoising(examples)
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
            batch["bag_of_words"] = bag_of_words(input_ids, torch.from_numpy(maskable), len(self.tokenizer))
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
            rows = [
                self.masker.select(ids[b], starts[b], maskable[b], self.decoder_ratio, self.rng) for _ in range(length)
            ]
            visible[b] = ~np.stack(rows) & attention[b][None, :]
        visible[:, :, 0] = True  # the [CLS] slot carries the sentence embedding: always visible
        diagonal = np.arange(length)
        visible[:, diagonal, diagonal] = False  # a position never sees itself
        return visible

    def denoising(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """TSDAE: (damaged, original) texts; words are split on white space (no tokenizer data to download)."""
        originals = self.tokenizer.batch_decode([e["input_ids"] for e in examples], skip_special_tokens=True)
        damaged = []
        for text in originals:
            words = text.split()
            keep = self.rng.random(len(words)) >= self.deletion_ratio
            if words and not keep.any():
                keep[self.rng.integers(len(words))] = True
            damaged.append(" ".join(w for w, k in zip(words, keep) if k))
        source = self.tokenizer(damaged, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        target = self.tokenizer(
            originals, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        return {
            "source_input_ids": source["input_ids"],
            "source_attention_mask": source["attention_mask"],
            "target_input_ids": target["input_ids"],
            "target_attention_mask": target["attention_mask"],
        }


def bag_of_words(input_ids: torch.Tensor, ordinary: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """DupMAE's target as the reference builds it: each distinct ordinary token of a text weighs 1 / (the text's
    number of ordinary tokens), so a repeated token counts once and the weights sum to distinct / all."""
    counts = ordinary.sum(dim=1, keepdim=True).clamp(min=1).float()
    present = torch.zeros(len(input_ids), vocab_size).scatter_(1, input_ids.masked_fill(~ordinary, 0), ordinary.float())
    return present / counts
