"""Length-sorted, token-budget batching: the inner loop of every encode.

sentence-transformers sorts by character length and uses a fixed batch size. Sorting by the real token count and
filling each batch up to a token budget wastes less padding and keeps CPU batches cache-sized, which is where
embedkit's speed over a plain ``encode`` comes from (``benchmarks/encode.py`` measures it).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from embedkit.models.device import autocast

if TYPE_CHECKING:
    from embedkit.models.embedding_model import EmbeddingModel

MAX_BATCH = 128
STATIC_BATCH = 1024
TOKENIZE_CHUNK = 8192  # texts tokenized at once: 8,192 x 512 tokens of int64 ids and mask stay near 100 MB


def token_budget_batches(lengths: np.ndarray, budget: int, max_batch: int = MAX_BATCH) -> Iterator[np.ndarray]:
    """Indices in descending length, cut into batches whose padded size (n x longest) stays within ``budget``."""
    order = np.argsort(-lengths, kind="stable")
    start = 0
    while start < len(order):
        size = int(max(1, min(max_batch, budget // max(1, int(lengths[order[start]])))))
        yield order[start : start + size]
        start += size


def token_lengths(model: EmbeddingModel, texts: list[str], prompt: str) -> np.ndarray:
    """Token count of each (prompted) text after truncation, as the model's tokenizer sees it."""
    return TextBatcher.of(model, weightless=False).lengths(texts, prompt)


class _ConfigOnly(torch.nn.Module):
    """Stands in for a network inside a copied input module: preprocessing reads the config, never the weights."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config


@dataclass
class TextBatcher:
    """Tokenization and batching, the CPU half of an encode, apart from the model's forward pass.

    ``of(model)`` keeps the model's own input module (so features are exactly what ``SentenceTransformer.preprocess``
    makes), by default with its networks replaced by their configs: it pickles to about 1 MB, so CPU tasks on other
    processes or machines (the Ray executor) can tokenize while stateful workers hold the only copies of the weights.
    """

    input_module: Any
    max_length: int | None
    batch_tokens: int

    @classmethod
    def of(cls, model: EmbeddingModel, weightless: bool = True) -> TextBatcher:
        module = model.st[0]
        if weightless:
            module = copy.copy(module)
            module._modules = {name: _ConfigOnly(getattr(sub, "config", None)) for name, sub in module._modules.items()}
        return cls(module, model.max_length, model.batch_tokens)

    def lengths(self, texts: list[str], prompt: str) -> np.ndarray:
        prompted = [prompt + text for text in texts] if prompt else texts
        tokenizer = self.input_module.tokenizer
        if self.max_length is None:  # a static model's own ``tokenizers.Tokenizer``: no truncation, no specials
            encodings = tokenizer.encode_batch(prompted, add_special_tokens=False)
            return np.fromiter((len(row.ids) for row in encodings), dtype=np.int64, count=len(texts))
        ids = tokenizer(prompted, truncation=True, max_length=self.max_length, add_special_tokens=True)["input_ids"]
        return np.fromiter((len(row) for row in ids), dtype=np.int64, count=len(texts))

    def batches(self, texts: list[str], prompt: str) -> Iterator[tuple[np.ndarray, dict[str, Any]]]:
        """``(indices, features)`` per batch: longest texts first, each batch within the token budget.

        Each chunk of texts is tokenized once, padded to its longest text; a batch is its rows cut to the batch's own
        longest, which is exactly what tokenizing the batch alone gives (padding is the only difference) at half the
        tokenizer's work of measuring lengths first and tokenizing each batch again.
        A static model pads nothing and its forward is a lookup, so its texts go in input order, ``STATIC_BATCH`` at a
        time (sorting by length would cost a second tokenization and save nothing).
        """
        if self.max_length is None:
            for start in range(0, len(texts), STATIC_BATCH):
                batch = np.arange(start, min(len(texts), start + STATIC_BATCH))
                yield batch, self.input_module.preprocess([texts[i] for i in batch], prompt=prompt or None)
            return
        for start in range(0, len(texts), TOKENIZE_CHUNK):
            chunk = self.input_module.preprocess(texts[start : start + TOKENIZE_CHUNK], prompt=prompt or None)
            mask = chunk["attention_mask"]
            lengths = mask.sum(dim=1).numpy()
            left = self.input_module.tokenizer.padding_side == "left"
            for batch in token_budget_batches(lengths, self.batch_tokens):
                yield (
                    start + batch,
                    _rows(chunk, torch.from_numpy(batch), int(lengths[batch].max()), mask.shape[1], left),
                )


def _rows(features: dict[str, Any], rows: torch.Tensor, length: int, padded: int, left: bool) -> dict[str, Any]:
    """The features of ``rows``, their padding cut to ``length`` tokens; scalars and names pass through."""
    columns = slice(padded - length, padded) if left else slice(0, length)
    out: dict[str, Any] = {}
    for key, value in features.items():
        if not isinstance(value, torch.Tensor) or value.dim() == 0:
            out[key] = value
        elif value.dim() >= 2 and value.shape[1] == padded:
            out[key] = value[rows][:, columns].contiguous()  # its own storage: a pickled batch (Ray) is its size
        else:
            out[key] = value[rows]
    return out


def embed_features(model: EmbeddingModel, features: dict[str, Any]) -> np.ndarray:
    """One batch's forward pass (autocast as the model's dtype asks), normalised if the model is, as float32."""
    st = model.st
    features = {k: v.to(st.device) if isinstance(v, torch.Tensor) else v for k, v in features.items()}
    with autocast(model.device, model.dtype):
        embeddings = st(features)["sentence_embedding"]
    embeddings = embeddings.float()
    if model.normalize:
        embeddings = torch.nn.functional.normalize(embeddings, p=2, dim=1)
    return embeddings.cpu().numpy()


def encode_texts(
    model: EmbeddingModel,
    texts: list[str],
    prompt: str = "",
    show_progress: bool | None = None,
    progress: tqdm | None = None,
) -> np.ndarray:
    """Embed ``texts`` into a float32 array in input order; ``progress`` is an outer bar to advance instead."""
    out = np.empty((len(texts), model.dim), dtype=np.float32)
    if not texts:
        return out
    model.st.eval()
    show = len(texts) >= 1000 if show_progress is None else show_progress
    own_bar = tqdm(total=len(texts), desc="Encoding", unit="text", disable=progress is not None or not show)
    bar = progress if progress is not None else own_bar
    with own_bar, torch.inference_mode():
        for batch, features in TextBatcher.of(model, weightless=False).batches(texts, prompt):
            out[batch] = embed_features(model, features)
            bar.update(len(batch))
    return out
