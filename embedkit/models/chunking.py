"""How a long document becomes chunk rows: the ``Chunking`` setting and the token spans it cuts.

Every method cuts the same way, in the model's own tokens: ``window`` chunks of ``size`` tokens (the chunk as the
model reads it, its special tokens and document prompt included) stepping by ``size - overlap``; ``sentence`` chunks
pack whole sentences up to that size (a longer sentence is cut into windows) and carry back whole sentences of up to
``overlap`` tokens; ``late`` takes the window spans but pools them from one encode of the whole document
(``late_chunking``). A chunk is a span of the document's content tokens with its character offsets in the document
text, so a hit can show the span as its snippet. No torch here: the index and search layers read these settings.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from embedkit.errors import EmbedkitError
from embedkit.validation import check_whole

METHODS = ("none", "window", "sentence", "late")
CHUNK_SEPARATOR = "#"  # a chunk row's id is ``<document id>#<n>``, pyserini's passage ids
MAX_CHUNK_TOKENS = 1 << 20
# A sentence ends at ., ! or ? (with closing quotes or brackets) followed by white space: plain, predictable and with
# no model or data file to download; abbreviations such as "e.g. x" split early, which only makes a chunk shorter.
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s+")


@dataclass(frozen=True)
class Chunking:
    """Documents cut into chunks of ``size`` tokens overlapping by ``overlap``; ``none`` encodes each document
    whole (truncated at the model's max length). ``context``: with ``late``, the tokens of the window before that
    each further window of a document longer than the model's max length re-reads, for context, before its own."""

    method: str = "none"
    size: int = 256
    overlap: int = 0
    context: int | None = None

    def check(self, max_length: int | None = None) -> Chunking:
        """Refuse settings that cannot cut (by the flag names); ``max_length``: the model's, when it is known."""
        if self.method not in METHODS:
            raise EmbedkitError(f"unknown value '{self.method}' (choose from {', '.join(METHODS)})", field="--chunking")
        if self.method == "none":
            return self
        check_whole(self.size, "--chunk-size", minimum=4, maximum=MAX_CHUNK_TOKENS)
        check_whole(self.overlap, "--chunk-overlap", minimum=0, maximum=MAX_CHUNK_TOKENS)
        check_whole(self.context, "context", minimum=0, maximum=MAX_CHUNK_TOKENS)
        if self.overlap >= self.size:
            raise EmbedkitError(
                f"must be less than --chunk-size {self.size}, not {self.overlap}: each chunk must move on",
                field="--chunk-overlap",
            )
        if self.context is not None and self.method != "late":
            raise EmbedkitError("is late chunking's; not for the other methods", field="context")
        if max_length is not None and self.size > max_length:
            what = "encodes each chunk" if self.method != "late" else "pools chunks out of windows"
            raise EmbedkitError(
                f"must be at most the model's max length {max_length} (the {self.method} method {what} of at most "
                f"that many tokens), not {self.size}; raise --max-length up to the model's positions or choose a "
                "smaller --chunk-size",
                field="--chunk-size",
            )
        return self

    @property
    def active(self) -> bool:
        return self.method != "none"

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        if values["context"] is None:
            del values["context"]
        return values

    @classmethod
    def from_dict(cls, values: Any, field: str = "chunking") -> Chunking | None:
        """The setting a manifest, report or YAML records (a mapping, or a method name); None when absent."""
        if values is None:
            return None
        if isinstance(values, str):
            values = {"method": values}
        if not isinstance(values, dict) or set(values) - {"method", "size", "overlap", "context"}:
            raise EmbedkitError("expected a mapping of method, size, overlap (and context)", field=field)
        return cls(**values).check()


def late_context(chunking: Chunking, max_length: int, specials: int) -> int:
    """Tokens of context a further window re-reads: the setting, else a quarter of a window's content."""
    window = max_length - specials
    context = (window // 4) if chunking.context is None else chunking.context
    if context >= window:
        raise EmbedkitError(
            f"must be less than the {window} content tokens of a {max_length}-token window, not {context}",
            field="context",
        )
    return context


@dataclass
class Chunks:
    """A batch of documents as chunk rows: the rows (any family's), each chunk's characters in its document, chunks
    per document."""

    vectors: Any
    spans: np.ndarray
    counts: np.ndarray


@dataclass
class DocumentTokens:
    """A document tokenized once: its content tokens' ids and character offsets in the text (prompt excluded)."""

    prompt_ids: list[int]
    ids: list[int]
    offsets: list[tuple[int, int]]


def tokenize_document(tokenizer: Any, text: str, prompt: str) -> DocumentTokens:
    """The prompted text's tokens, without special tokens, split into the prompt's and the text's."""
    encoded = tokenizer(prompt + text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    ids, offsets, cut = encoded["input_ids"], encoded["offset_mapping"], len(prompt)
    first = next((i for i, (start, _) in enumerate(offsets) if start >= cut), len(ids))
    return DocumentTokens(
        prompt_ids=list(ids[:first]),
        ids=list(ids[first:]),
        offsets=[(start - cut, end - cut) for start, end in offsets[first:]],
    )


def content_size(chunking: Chunking, specials: int, prompt_tokens: int) -> int:
    """Content tokens a chunk holds: its size less the special tokens and the document prompt it is read with."""
    size = chunking.size - specials - prompt_tokens
    if size <= chunking.overlap:
        raise EmbedkitError(
            f"leaves {max(size, 0)} tokens of text per chunk after {specials} special and {prompt_tokens} prompt "
            f"tokens, not more than --chunk-overlap {chunking.overlap}; choose a larger --chunk-size",
            field="--chunk-size",
        )
    return size


def window_spans(count: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """``[start, stop)`` token spans of ``size`` stepping by ``size - overlap`` until the last token is covered."""
    if count == 0:
        return [(0, 0)]
    spans, start = [], 0
    while True:
        spans.append((start, min(count, start + size)))
        if start + size >= count:
            return spans
        start += size - overlap


def sentence_spans(tokens: DocumentTokens, text: str, size: int, overlap: int) -> list[tuple[int, int]]:
    """Whole sentences packed into spans of at most ``size`` tokens; each span after the first starts with the
    previous span's last sentences that fit in ``overlap`` tokens (never all of them, so every span moves on)."""
    count = len(tokens.ids)
    if count == 0:
        return [(0, 0)]
    starts = [0] + [match.end() for match in _SENTENCE_END.finditer(text)]
    token_starts = np.array([start for start, _ in tokens.offsets])
    bounds = sorted({int(np.searchsorted(token_starts, start)) for start in starts} | {count})
    sentences = [(a, b) for a, b in itertools.pairwise(bounds) if b > a]
    pieces = [piece for a, b in sentences for piece in _cut(a, b, size)]  # a sentence over size: windows
    spans: list[tuple[int, int]] = []
    current: list[tuple[int, int]] = []
    for piece in pieces:
        if current and piece[1] - current[0][0] > size:
            spans.append((current[0][0], current[-1][1]))
            carried: list[tuple[int, int]] = []
            for previous in reversed(current[1:]):
                if current[-1][1] - previous[0] > overlap or piece[1] - previous[0] > size:
                    break
                carried.insert(0, previous)
            current = carried
        current.append(piece)
    spans.append((current[0][0], current[-1][1]))
    return spans


def _cut(start: int, stop: int, size: int) -> list[tuple[int, int]]:
    return [(a, min(stop, a + size)) for a in range(start, stop, size)]


def chunk_spans(chunking: Chunking, tokens: DocumentTokens, text: str, specials: int) -> list[tuple[int, int]]:
    """The content-token spans of a document's chunks (one empty span for a text without tokens)."""
    size = content_size(chunking, specials, len(tokens.prompt_ids))
    if chunking.method == "sentence":
        return sentence_spans(tokens, text, size, chunking.overlap)
    return window_spans(len(tokens.ids), size, chunking.overlap)


def char_spans(tokens: DocumentTokens, spans: list[tuple[int, int]]) -> np.ndarray:
    """Each token span's ``[start, end)`` characters in the document text (int64, one row per chunk)."""
    out = np.zeros((len(spans), 2), dtype=np.int64)
    for row, (a, b) in enumerate(spans):
        if b > a:
            out[row] = tokens.offsets[a][0], tokens.offsets[b - 1][1]
    return out
