"""Masking policies shared by every objective, and BERT's 80/10/10 corruption of the chosen positions.

A policy picks ``round(ratio * n)`` of a text's ``n`` maskable tokens (special tokens and padding never are):

- ``random``: tokens uniformly at random (BERT, Devlin et al., 2019).
- ``whole_word``: whole words only, never part of one (BERT's whole-word masking; RetroMAE masks this way).
- ``span``: runs of whole words with geometric lengths (p 0.2, at most 10 words), as SpanBERT (Joshi et al., 2020).
- ``idf``: tokens drawn without replacement with probability proportional to their IDF over the corpus, so rare,
  informative terms are hidden more often (retrieval-oriented masking, ROM; Long et al., 2022).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from embedkit.pretrain.config import POLICIES


@dataclass
class Masker:
    """Chooses positions to mask in one tokenised text; ``idf`` is indexed by token id (policy ``idf`` only)."""

    policy: str = "random"
    idf: np.ndarray | None = None
    span_p: float = 0.2
    max_span_words: int = 10

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown masking policy '{self.policy}'")
        if self.policy == "idf" and self.idf is None:
            raise ValueError("the idf policy needs corpus IDF weights")

    def select(
        self, ids: np.ndarray, word_starts: np.ndarray, maskable: np.ndarray, ratio: float, rng: np.random.Generator
    ) -> np.ndarray:
        """A boolean mask over ``ids`` choosing ``round(ratio * maskable.sum())`` maskable positions."""
        mask = np.zeros(len(ids), dtype=bool)
        positions = np.flatnonzero(maskable)
        target = round(ratio * len(positions))
        if target == 0:
            return mask
        if self.policy == "random":
            mask[rng.choice(positions, target, replace=False)] = True
        elif self.policy == "idf":
            weights = np.maximum(self.idf[ids[positions]], 1e-6)
            keys = np.log(weights) + rng.gumbel(size=len(positions))  # Gumbel top-k: sampling without replacement
            mask[positions[np.argsort(-keys)[:target]]] = True
        else:
            words = _words(positions, word_starts)
            chosen = (
                _whole_words(words, target, rng) if self.policy == "whole_word" else self._spans(words, target, rng)
            )
            mask[chosen] = True
        return mask

    def _spans(self, words: list[np.ndarray], target: int, rng: np.random.Generator) -> np.ndarray:
        taken = np.zeros(len(words), dtype=bool)
        covered = 0
        for _ in range(10 * len(words)):
            if covered >= target:
                break
            length = min(int(rng.geometric(self.span_p)), self.max_span_words)
            start = int(rng.integers(len(words)))
            for w in range(start, min(start + length, len(words))):
                if taken[w]:
                    break
                if covered + len(words[w]) > target:
                    break
                taken[w] = True
                covered += len(words[w])
        chosen = [words[w] for w in np.flatnonzero(taken)]
        if covered < target:  # fill what random spans left with single words, still whole
            rest = [words[w] for w in np.flatnonzero(~taken)]
            chosen.append(_whole_words(rest, target - covered, rng))
        return np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)


def _words(positions: np.ndarray, word_starts: np.ndarray) -> list[np.ndarray]:
    """Maskable positions grouped into words (a word starts where ``word_starts`` is 1)."""
    if len(positions) == 0:
        return []
    starts = np.flatnonzero(word_starts[positions].astype(bool) | np.r_[True, np.diff(positions) > 1])
    return np.split(positions, starts[1:])


def _whole_words(words: list[np.ndarray], target: int, rng: np.random.Generator) -> np.ndarray:
    """Words in random order, each taken whole if it still fits under ``target`` tokens."""
    chosen, covered = [], 0
    for w in rng.permutation(len(words)):
        if covered + len(words[w]) <= target:
            chosen.append(words[w])
            covered += len(words[w])
            if covered == target:
                break
    return np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)


def corrupt(
    input_ids: torch.Tensor, mask: torch.Tensor, mask_token_id: int, vocab_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption of the chosen positions: 80 % [MASK], 10 % a random token, 10 % unchanged.

    Returns the corrupted ids and the labels (the original id where masked, -100 elsewhere).
    """
    labels = torch.where(mask, input_ids, torch.full_like(input_ids, -100))
    draw = torch.rand(input_ids.shape, generator=generator)
    corrupted = input_ids.clone()
    corrupted[mask & (draw < 0.8)] = mask_token_id
    random_positions = mask & (draw >= 0.8) & (draw < 0.9)
    corrupted[random_positions] = torch.randint(
        vocab_size, (int(random_positions.sum()),), generator=generator, dtype=input_ids.dtype
    )
    return corrupted, labels
