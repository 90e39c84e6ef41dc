"""Encoding documents as chunks: each chunk's text on its own (``window``, ``sentence``), or pooled out of one encode
of the whole document (``late``, Günther et al. 2024, "Late Chunking": every chunk vector sees its context).

A late document longer than the model's max length is read in windows of that length; every window after the first
re-reads the ``context`` tokens before its own and its vectors for those are dropped ("long late chunking" in the
paper), so each token's vector comes from one window and the stitched sequence is as long as the document. The first
chunk owns the leading special tokens (and the document prompt), the last the trailing ones: one chunk over a whole
document that fits is pooled over exactly what an ordinary encode pools over.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from embedkit.errors import EmbedkitError
from embedkit.models.batching import encode_texts, token_budget_batches
from embedkit.models.chunking import (
    Chunking,
    Chunks,
    DocumentTokens,
    char_spans,
    chunk_spans,
    late_context,
    tokenize_document,
)
from embedkit.models.device import autocast

if TYPE_CHECKING:
    from embedkit.models.embedding_model import EmbeddingModel

LATE_POOLINGS = ("mean", "max")  # poolings that read a span of tokens alone; CLS or last-token pooling do not
BLOCK_TOKENS = 262_144  # tokens of documents whose token vectors are held at once (about 400 MB at 384 dimensions)


def check_chunkable(model: Any, chunking: Chunking) -> None:
    """What the model must allow for ``chunking``: a max length (a static model reads every token and has none)
    and, for late chunking, one vector per chunk pooled from a dense model's token vectors by a pooling that pools a
    span on its own."""
    if chunking.method == "late" and not model.pools_token_vectors:
        raise EmbedkitError(
            f"late chunking pools a dense model's token vectors; chunk a {model.kind} model with window or sentence",
            field="--chunking",
        )
    if model.max_length is None:
        raise EmbedkitError("a static model reads every token of a document; it has no max length to chunk for")
    chunking.check(model.max_length)
    if chunking.method == "late" and model.backend != "torch":
        raise EmbedkitError(
            f"late chunking reads the token vectors of the torch network, not the {model.backend} backend's",
            field="--backend",
        )
    if chunking.method == "late" and model.pooling not in LATE_POOLINGS:
        raise EmbedkitError(
            f"late chunking pools each chunk's own tokens: it needs mean or max pooling, not '{model.pooling}'",
            field="--chunking",
        )


def _specials(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after a text (``[CLS]``, ``[SEP]`` for BERT)."""
    bare = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(bare) + 1):
        if full[start : start + len(bare)] == bare:
            return full[:start], full[start + len(bare) :]
    raise EmbedkitError("cannot tell this tokenizer's special tokens apart; chunk with --chunking none")


def encode_chunks(model: Any, texts: list[str], chunking: Chunking, progress: Any = None) -> Chunks:
    """``texts`` as chunk rows in document order: the model's own rows (a dense model's float32 vectors, normalised
    if it is; a sparse or multi-vector model's sparse or token rows), one per chunk."""
    check_chunkable(model, chunking)
    tokenizer = model.st.tokenizer
    before, after = _specials(tokenizer)
    prompt = model.document_prompt
    tokens = [tokenize_document(tokenizer, text, prompt) for text in texts]
    spans = [chunk_spans(chunking, doc, text, len(before) + len(after)) for doc, text in zip(tokens, texts)]
    counts = np.array([len(doc_spans) for doc_spans in spans], dtype=np.int64)
    chars = np.concatenate([char_spans(doc, doc_spans) for doc, doc_spans in zip(tokens, spans)])
    if chunking.method != "late":
        pieces = [text[a:b] for text, rows in zip(texts, (chars[i:j] for i, j in _bounds(counts))) for a, b in rows]
        if model.encodes_token_batches:  # the token-budget batches of the dense path, its progress counted here
            rows = encode_texts(model, pieces, prompt=prompt, show_progress=False)
        else:
            rows = model.encode_documents(pieces)
        if progress is not None:
            progress.update(len(texts))
        return Chunks(rows, chars, counts)
    context = late_context(chunking, model.max_length, len(before) + len(after))
    vectors = np.empty((int(counts.sum()), model.dim), dtype=np.float32)
    row = 0
    for block in _blocks(tokens):
        stitched = late_token_vectors(model, [tokens[doc] for doc in block], before, after, context)
        for doc, token_vectors in zip(block, stitched):
            pooled = pool_spans(model, token_vectors, spans[doc], len(before) + len(tokens[doc].prompt_ids))
            vectors[row : row + len(pooled)] = pooled
            row += len(pooled)
        if progress is not None:
            progress.update(len(block))
    return Chunks(vectors, chars, counts)


def document_spans(model: Any, text: str) -> np.ndarray:
    """A document's chunks' character spans, cut again exactly as its encode cut them (for a hit's snippet)."""
    if model.chunking is None:
        raise EmbedkitError("this model encodes documents whole; load it with a chunking", field="chunking")
    tokenizer = model.st.tokenizer
    before, after = _specials(tokenizer)
    tokens = tokenize_document(tokenizer, text, model.document_prompt)
    return char_spans(tokens, chunk_spans(model.chunking, tokens, text, len(before) + len(after)))


def _bounds(counts: np.ndarray) -> list[tuple[int, int]]:
    ends = np.cumsum(counts)
    return list(zip((ends - counts).tolist(), ends.tolist()))


def _blocks(tokens: list[DocumentTokens]) -> list[list[int]]:
    """Documents in order, grouped so each group's token vectors fit in ``BLOCK_TOKENS``."""
    blocks: list[list[int]] = [[]]
    held = 0
    for doc, doc_tokens in enumerate(tokens):
        size = len(doc_tokens.ids) + len(doc_tokens.prompt_ids)
        if blocks[-1] and held + size > BLOCK_TOKENS:
            blocks.append([])
            held = 0
        blocks[-1].append(doc)
        held += size
    return blocks


def _windows(length: int, window: int, context: int) -> list[tuple[int, int, int]]:
    """``(start, keep_from, stop)`` over a document's ``length`` inner tokens: each window reads ``start:stop`` and
    keeps its vectors from ``keep_from`` on (the tokens before are context, kept from the window before)."""
    if length <= window:
        return [(0, 0, length)]
    windows, keep = [(0, 0, window)], window
    while keep < length:
        start = keep - context
        windows.append((start, keep, min(length, start + window)))
        keep = start + window
    return windows


def late_token_vectors(
    model: EmbeddingModel, documents: list[DocumentTokens], before: list[int], after: list[int], context: int
) -> list[torch.Tensor]:
    """Each document's token vectors, stitched from its windows: ``before`` + prompt + text + ``after``."""
    window = model.max_length - len(before) - len(after)
    reads = []  # (document, window input ids, keep_from - start, start, stop)
    for doc, tokens in enumerate(documents):
        inner = tokens.prompt_ids + tokens.ids
        for start, keep, stop in _windows(len(inner), window, context):
            reads.append((doc, before + inner[start:stop] + after, keep - start, keep, stop))
    outputs: list[torch.Tensor | None] = [None] * len(reads)
    lengths = np.array([len(read[1]) for read in reads], dtype=np.int64)
    network = model.st[0]
    pad = network.tokenizer.pad_token_id or 0
    with torch.inference_mode():
        for batch in token_budget_batches(lengths, model.batch_tokens):
            longest = int(lengths[batch].max())
            ids = torch.full((len(batch), longest), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), longest), dtype=torch.long)
            for position, read in enumerate(batch):
                ids[position, : lengths[read]] = torch.tensor(reads[read][1])
                mask[position, : lengths[read]] = 1
            features = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
            features = {key: value.to(model.st.device) for key, value in features.items()}
            with autocast(model.device, model.dtype):
                hidden = network(features)["token_embeddings"].float().cpu()
            for position, read in enumerate(batch):
                outputs[read] = hidden[position, : lengths[read]]
    stitched: list[list[torch.Tensor]] = [[] for _ in documents]
    for read, (doc, _, skip, keep, stop) in zip(outputs, reads):
        first, last = keep == 0, stop == len(documents[doc].prompt_ids) + len(documents[doc].ids)
        lead = 0 if first else len(before) + skip
        tail = len(read) if last else len(read) - len(after)
        stitched[doc].append(read[lead:tail])
    return [torch.cat(parts) for parts in stitched]


def _pooling(model: EmbeddingModel) -> Any:
    from sentence_transformers.sentence_transformer.modules import Pooling

    return next(module for module in model.st if isinstance(module, Pooling))


def pool_spans(
    model: EmbeddingModel, token_vectors: torch.Tensor, spans: list[tuple[int, int]], lead: int
) -> np.ndarray:
    """Each content-token span pooled with the model's own pooling module (normalised if the model is); ``lead``:
    the positions before the first content token. The first span starts at position 0, the last runs to the end."""
    bounds = [[lead + a, lead + b] for a, b in spans]
    bounds[0][0], bounds[-1][1] = 0, len(token_vectors)
    longest = max(b - a for a, b in bounds)
    embeddings = torch.zeros((len(bounds), longest, token_vectors.shape[1]))
    mask = torch.zeros((len(bounds), longest), dtype=torch.long)
    for row, (a, b) in enumerate(bounds):
        embeddings[row, : b - a], mask[row, : b - a] = token_vectors[a:b], 1
    with torch.inference_mode():
        pooled = _pooling(model)({"token_embeddings": embeddings, "attention_mask": mask})["sentence_embedding"]
        if model.normalize:
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
    return pooled.float().numpy()
