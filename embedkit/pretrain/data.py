"""A raw corpus to tokenised, memory-mapped examples for pretraining, and the corpus IDF that ROM masking needs.

Sources: a BEIR folder or name (``corpus.jsonl``; title and text joined as BEIR does), a JSONL file of ``{"text"}``
(optionally ``"title"``), a plain text file (one text a line), a folder written by ``datasets.save_to_disk``, or a
``datasets.Dataset``. Files become Arrow tables on disk and tokenisation is a batched ``datasets`` map whose output
is cached on disk too, so a corpus larger than memory streams through.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets
import numpy as np
from transformers import PreTrainedTokenizerBase

from embedkit.data.beir import READER_VERSION, arrow_from_generator, doc_text, load_dataset
from embedkit.data.jsonl import read_lines_of, read_records, require_file
from embedkit.errors import EmbedkitError
from embedkit.storage import sha256_file
from embedkit.validation import check_text


def _jsonl_texts(path: str, stamp: str):
    del stamp  # keys the Arrow cache to the file's content
    for _, record in read_records(Path(path), required=("text",)):
        yield {"text": doc_text(record)}


def _plain_texts(path: str, stamp: str):
    del stamp
    for number, line in read_lines_of(Path(path)):
        text = check_text(line.strip(), path, number, "text", required=True)
        if text:
            yield {"text": text}


def _from_generator(generator: Any, path: Path) -> datasets.Dataset:
    return arrow_from_generator(generator, {"path": str(path), "stamp": f"{sha256_file(path)}/reader-{READER_VERSION}"})


def _with_text(dataset: datasets.Dataset, origin: str) -> datasets.Dataset:
    if "text" not in dataset.column_names:
        raise EmbedkitError(f"no 'text' column (columns: {', '.join(dataset.column_names)})", path=origin)
    if "title" in dataset.column_names:
        return dataset.map(lambda row: {"text": doc_text(row)}, remove_columns=dataset.column_names)
    return dataset.select_columns(["text"])


def load_texts(
    source: str | Path | datasets.Dataset, limit: int | None = None, data_dir: str | None = None
) -> tuple[datasets.Dataset, str]:
    """The corpus as a one-column (``text``) Dataset, and a description of where it came from."""
    if isinstance(source, datasets.Dataset):
        texts, origin = _with_text(source, "dataset"), f"datasets.Dataset ({len(source)} rows)"
    else:
        path = Path(source).expanduser()
        if path.is_dir() and (path / "dataset_info.json").is_file():
            texts, origin = _with_text(datasets.load_from_disk(str(path)), str(path)), f"datasets folder {path}"
        elif path.suffix in (".jsonl", ".gz") and not path.is_dir():
            require_file(path)
            texts, origin = _from_generator(_jsonl_texts, path), f"JSONL {path}"
        elif path.suffix == ".txt":
            require_file(path)
            texts, origin = _from_generator(_plain_texts, path), f"text file {path}"
        else:
            beir = load_dataset(source, data_dir=data_dir)
            texts = beir.corpus.map(lambda row: {"text": doc_text(row)}, remove_columns=beir.corpus.column_names)
            origin = f"BEIR corpus {beir.corpus_file}"
    texts = texts.filter(lambda row: bool(row["text"]))
    if limit is not None:
        texts = texts.select(range(min(limit, len(texts))))
    if len(texts) == 0:
        raise EmbedkitError(
            "the corpus has no non-empty text", path=str(source) if not isinstance(source, datasets.Dataset) else None
        )
    return texts, origin


def tokenize(
    texts: datasets.Dataset, tokenizer: PreTrainedTokenizerBase, max_length: int, overlap: int | None = None
) -> datasets.Dataset:
    """``input_ids`` (with special tokens), ``word_starts`` (1 where a word begins) and ``example`` (the row's number,
    which seeds its masks) per text; with ``overlap`` a long text becomes windows of ``max_length`` tokens that share
    ``overlap`` tokens with the window before, instead of being cut after the first."""
    windows = overlap is not None and tokenizer.is_fast

    def encode(batch: dict[str, list[str]]) -> dict[str, list[list[int]]]:
        encoded = tokenizer(
            batch["text"],
            truncation=True,
            max_length=max_length,
            stride=overlap if windows else 0,
            return_overflowing_tokens=windows,
        )
        starts = []
        for index, ids in enumerate(encoded["input_ids"]):
            word_ids = encoded.word_ids(index) if tokenizer.is_fast else [None] * len(ids)
            starts.append([int(w is None or i == 0 or w != word_ids[i - 1]) for i, w in enumerate(word_ids)])
        return {"input_ids": encoded["input_ids"], "word_starts": starts}

    encoded = texts.map(encode, batched=True, batch_size=1000, remove_columns=texts.column_names, desc="tokenising")
    return encoded.add_column("example", list(range(len(encoded))))


def corpus_idf(tokenized: datasets.Dataset, vocab_size: int) -> np.ndarray:
    """BM25's IDF, log(1 + (N - df + 0.5) / (df + 0.5)), of every token id over the tokenised corpus (streamed)."""
    df = np.zeros(vocab_size, dtype=np.int64)
    for batch in tokenized.select_columns(["input_ids"]).iter(batch_size=1000):
        for ids in batch["input_ids"]:
            df[np.unique(np.asarray(ids, dtype=np.int64))] += 1
    n = len(tokenized)
    return np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32)
