"""Length-sorted, token-budget batching: the inner loop of every encode.

sentence-transformers sorts by character length and uses a fixed batch size. Sorting by the real token count and
filling each batch up to a token budget wastes less padding and keeps CPU batches cache-sized, which is where
embedkit's speed over a plain ``encode`` comes from (``benchmarks/encode.py`` measures it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import torch
from tqdm.auto import tqdm

from embedkit.models.device import autocast

if TYPE_CHECKING:
    from embedkit.models.embedding_model import EmbeddingModel

MAX_BATCH = 128


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
    tokenizer = model.st.tokenizer
    prompted = [prompt + text for text in texts] if prompt else texts
    ids = tokenizer(prompted, truncation=True, max_length=model.max_length, add_special_tokens=True)["input_ids"]
    return np.fromiter((len(row) for row in ids), dtype=np.int64, count=len(texts))


@torch.inference_mode()
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
    st = model.st
    st.eval()
    lengths = token_lengths(model, texts, prompt)
    batches = list(token_budget_batches(lengths, model.batch_tokens))
    show = len(texts) >= 1000 if show_progress is None else show_progress
    own_bar = tqdm(total=len(texts), desc="Encoding", unit="text", disable=progress is not None or not show)
    bar = progress if progress is not None else own_bar
    with own_bar:
        for batch in batches:
            features = st.preprocess([texts[i] for i in batch], prompt=prompt or None)
            features = {k: v.to(st.device) if isinstance(v, torch.Tensor) else v for k, v in features.items()}
            with autocast(model.device, model.dtype):
                embeddings = st(features)["sentence_embedding"]
            embeddings = embeddings.float()
            if model.normalize:
                embeddings = torch.nn.functional.normalize(embeddings, p=2, dim=1)
            out[batch] = embeddings.cpu().numpy()
            bar.update(len(batch))
    return out
