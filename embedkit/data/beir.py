"""A BEIR dataset folder: ``corpus.jsonl[.gz]``, ``queries.jsonl[.gz]``, ``qrels/<split>.tsv``.

The corpus is an Arrow-backed, memory-mapped ``datasets.Dataset`` so corpora larger than memory load;
queries and qrels are small and stay plain dicts.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import datasets

from embedkit.data.jsonl import find_file, read_records
from embedkit.data.resolve import resolve_dataset
from embedkit.errors import EmbedkitError
from embedkit.protocols import Qrels
from embedkit.storage import sha256_file

DOC_TEXT_RULE = "(title + ' ' + text).strip()  # as BEIR and MTEB join them"


def doc_text(doc: dict[str, Any]) -> str:
    """The text a document is encoded from: title and body joined as BEIR/MTEB do."""
    return ((doc.get("title") or "") + " " + (doc.get("text") or "")).strip()


def _corpus_rows(path: str, stamp: str):
    """Validate and yield corpus rows; ``stamp`` only keys the Arrow cache to the file's content."""
    del stamp
    seen: dict[str, int] = {}
    for number, record in read_records(Path(path), required=("_id", "text")):
        doc_id = record["_id"]
        if doc_id in seen:
            raise EmbedkitError(
                f"duplicate document id '{doc_id}' (first seen on line {seen[doc_id]})",
                path=path,
                line=number,
                field="_id",
            )
        seen[doc_id] = number
        yield {"_id": doc_id, "title": record.get("title") or "", "text": record["text"]}


def load_corpus(path: Path) -> datasets.Dataset:
    """Load and validate a BEIR corpus file into a memory-mapped Arrow dataset (cached by content hash)."""
    if next(read_records(path, required=("_id", "text")), None) is None:
        raise EmbedkitError("the corpus is empty", path=path)
    stamp = sha256_file(path)
    features = datasets.Features(
        {"_id": datasets.Value("string"), "title": datasets.Value("string"), "text": datasets.Value("string")}
    )
    return arrow_from_generator(_corpus_rows, {"path": str(path), "stamp": stamp}, features)


def arrow_from_generator(
    generator: Any, gen_kwargs: dict[str, Any], features: datasets.Features | None = None
) -> datasets.Dataset:
    """A memory-mapped Arrow dataset from a validating generator; its ``EmbedkitError`` surfaces unwrapped.

    ``datasets`` caches the result by the generator and ``gen_kwargs``, so pass a content stamp among them.
    """
    bars_were_on = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # a cache write, not work the user waits on
    try:
        return datasets.Dataset.from_generator(generator, gen_kwargs=gen_kwargs, features=features)
    except datasets.exceptions.DatasetGenerationError as err:
        cause = err.__cause__
        while cause is not None and not isinstance(cause, EmbedkitError):
            cause = cause.__cause__
        if cause is None:
            raise
        raise cause from None
    finally:
        if bars_were_on:
            datasets.enable_progress_bars()


def load_queries(path: Path) -> dict[str, str]:
    queries: dict[str, str] = {}
    for number, record in read_records(path, required=("_id", "text")):
        if record["_id"] in queries:
            raise EmbedkitError(f"duplicate query id '{record['_id']}'", path=path, line=number, field="_id")
        queries[record["_id"]] = record["text"]
    return queries


def load_qrels(path: Path, known_queries: dict[str, str] | None = None) -> Qrels:
    """Read a BEIR qrels TSV (header ``query-id corpus-id score``); judged queries must be known if given."""
    qrels: Qrels = {}
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if header is None:
            raise EmbedkitError("the qrels file is empty", path=path)
        for number, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != 3:
                raise EmbedkitError(f"expected 3 tab-separated columns, got {len(row)}", path=path, line=number)
            query_id, doc_id, grade = row
            if known_queries is not None and query_id not in known_queries:
                raise EmbedkitError(
                    f"query '{query_id}' is judged but absent from the queries file",
                    path=path,
                    line=number,
                    field="query-id",
                )
            try:
                qrels.setdefault(query_id, {})[doc_id] = int(grade)
            except ValueError:
                raise EmbedkitError(f"not an integer: {grade!r}", path=path, line=number, field="score") from None
    return qrels


@dataclass
class BeirDataset:
    """A dataset folder in BEIR's layout; corpus, queries and qrels load on first use."""

    path: Path
    name: str = ""
    _qrels: dict[str, Qrels] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.name = self.name or self.path.name

    @cached_property
    def corpus_file(self) -> Path:
        return find_file(self.path, "corpus")

    @cached_property
    def queries_file(self) -> Path:
        return find_file(self.path, "queries")

    @cached_property
    def corpus(self) -> datasets.Dataset:
        return load_corpus(self.corpus_file)

    @cached_property
    def queries(self) -> dict[str, str]:
        return load_queries(self.queries_file)

    def splits(self) -> list[str]:
        return sorted(p.stem for p in (self.path / "qrels").glob("*.tsv"))

    def qrels(self, split: str = "test") -> Qrels:
        """Judgements of ``split``; every judged query must exist in the queries file."""
        if split not in self._qrels:
            path = self.path / "qrels" / f"{split}.tsv"
            if not path.is_file():
                raise EmbedkitError(
                    f"no qrels for split '{split}' (available: {', '.join(self.splits()) or 'none'})", path=path
                )
            self._qrels[split] = load_qrels(path, known_queries=self.queries)
        return self._qrels[split]

    def split_queries(self, split: str = "test") -> dict[str, str]:
        """The queries judged in ``split``, in qrels order (what BEIR evaluates)."""
        queries = self.queries
        return {query_id: queries[query_id] for query_id in self.qrels(split)}

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": str(self.path),
            "corpus_sha256": sha256_file(self.corpus_file),
            "documents": len(self.corpus),
            "doc_text": DOC_TEXT_RULE,
        }


def load_dataset(name_or_path: str | Path, data_dir: str | Path | None = None) -> BeirDataset:
    """Load a BEIR dataset by folder path or by name (see :func:`resolve_dataset`)."""
    path = resolve_dataset(name_or_path, data_dir=data_dir)
    return BeirDataset(path=path, name=Path(name_or_path).name)
