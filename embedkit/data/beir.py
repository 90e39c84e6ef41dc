"""A BEIR dataset folder: ``corpus.jsonl[.gz]``, ``queries.jsonl[.gz]``, ``qrels/<split>.tsv``.

The corpus is an Arrow-backed, memory-mapped ``datasets.Dataset`` so corpora larger than memory load;
queries and qrels are small and stay plain dicts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import datasets

from embedkit.data.jsonl import find_file, read_lines_of, read_records
from embedkit.data.resolve import resolve_dataset
from embedkit.errors import EmbedkitError
from embedkit.protocols import Qrels
from embedkit.storage import sha256_file, sha256_json
from embedkit.validation import check_id

# Part of the Arrow cache key of a loaded corpus: bump it when the reader's checks change, so no corpus cached by an
# older reader skips them. 3: ids NFC-normalised (a corpus cached by 2 would keep its NFD ids).
READER_VERSION = 3
DOC_TEXT_RULE = "(title + ' ' + text).strip()  # as BEIR and MTEB join them"


def doc_text(doc: dict[str, Any]) -> str:
    """The text a document is encoded from: title and body joined as BEIR/MTEB do."""
    return ((doc.get("title") or "") + " " + (doc.get("text") or "")).strip()


def corpus_fingerprint(corpus: Any, chunk: int = 10_000) -> str:
    """The corpus as it is encoded, hashed: ids and document texts (``doc_text``), in order.

    This is the ``corpus_sha256`` of manifests, caches and reports alike; it does not depend on the file's name,
    compression or JSON layout.
    """
    digest = hashlib.sha256()
    for start in range(0, len(corpus), chunk):
        rows = corpus[start : start + chunk]
        if isinstance(rows, dict):  # a datasets.Dataset slice is a dict of columns
            titles = rows.get("title") or [""] * len(rows["_id"])
            pairs = zip(rows["_id"], (doc_text({"title": t, "text": x}) for t, x in zip(titles, rows["text"])))
        else:
            pairs = ((str(row["_id"]), doc_text(row)) for row in rows)
        for doc_id, text in pairs:
            digest.update(doc_id.encode() + b"\0" + text.encode() + b"\0")
    return digest.hexdigest()


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
    stamp = f"{sha256_file(path)}/reader-{READER_VERSION}"
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
    try:
        return datasets.Dataset.from_generator(generator, gen_kwargs=gen_kwargs, features=features)
    except datasets.exceptions.DatasetGenerationError as err:
        cause = err.__cause__
        while cause is not None and not isinstance(cause, EmbedkitError):
            cause = cause.__cause__
        if cause is None:
            raise
        raise cause from None


def load_queries(path: Path) -> dict[str, str]:
    """Query id (NFC) -> text; an id seen twice, also as two spellings of one NFC id, is refused with both lines."""
    queries: dict[str, str] = {}
    lines: dict[str, int] = {}
    for number, record in read_records(path, required=("_id", "text")):
        if record["_id"] in queries:
            message = f"duplicate query id '{record['_id']}' (first seen on line {lines[record['_id']]})"
            raise EmbedkitError(message, path=path, line=number, field="_id")
        queries[record["_id"]] = record["text"]
        lines[record["_id"]] = number
    if not queries:
        raise EmbedkitError("holds no queries", path=path)
    return queries


QRELS_HEADER_WORDS = {"query-id", "query_id", "queryid", "qid", "query"}


def _is_header(columns: list[str]) -> bool:
    """A first line that names its columns (BEIR's ``query-id corpus-id score``) rather than judging a document."""
    try:
        int(columns[-1])
    except ValueError:
        return columns[0].lower() in QRELS_HEADER_WORDS
    return False


def load_qrels(path: Path, known_queries: dict[str, str] | None = None) -> Qrels:
    """Judgements from a BEIR qrels TSV (``query-id corpus-id score``; its header line is optional) or a TREC qrels
    file (``qid iteration docid grade``). Every line is a judgement or an error: the header is recognised by its
    words, not skipped by position. A pair judged twice with different grades is refused, and so is a judged query
    absent from ``known_queries``.
    """
    qrels: Qrels = {}
    seen: dict[tuple[str, str], int] = {}
    first = True
    for number, line in read_lines_of(path):
        if not line.strip():
            continue
        tabbed = "\t" in line
        columns = line.split("\t") if tabbed else line.split()
        if first and _is_header(columns):
            first = False
            continue
        first = False
        if len(columns) == 4:  # TREC: qid iteration docid grade
            columns = [columns[0], columns[2], columns[3]]
        elif len(columns) != 3 or not tabbed:  # split on spaces, 3 columns could hide an empty or spaced id
            raise EmbedkitError(
                f"expected 3 tab-separated columns (BEIR) or 4 (TREC qrels), got {len(columns)}"
                + ("" if tabbed else " separated by spaces"),
                path=path,
                line=number,
            )
        query_id = check_id(columns[0], path, number, "query-id")
        doc_id = check_id(columns[1], path, number, "corpus-id")
        try:
            grade = int(columns[2])
        except ValueError:
            raise EmbedkitError(f"not an integer: {columns[2]!r}", path=path, line=number, field="score") from None
        if known_queries is not None and query_id not in known_queries:
            message = f"query '{query_id}' is judged but absent from the queries file"
            raise EmbedkitError(message, path=path, line=number, field="query-id")
        earlier = qrels.get(query_id, {}).get(doc_id)
        if earlier is not None and earlier != grade:
            raise EmbedkitError(
                f"'{query_id}' / '{doc_id}' judged {earlier} on line {seen[(query_id, doc_id)]} and {grade} here",
                path=path,
                line=number,
                field="score",
            )
        seen.setdefault((query_id, doc_id), number)
        qrels.setdefault(query_id, {})[doc_id] = grade
    if not qrels:
        raise EmbedkitError("the qrels file holds no judgements", path=path)
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

    def qrels_file(self, split: str = "test") -> Path:
        return self.path / "qrels" / f"{split}.tsv"

    def qrels(self, split: str = "test") -> Qrels:
        """Judgements of ``split``; every judged query must exist in the queries file."""
        if split not in self._qrels:
            path = self.qrels_file(split)
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

    def absent_judged(self, split: str = "test") -> list[str]:
        """Documents judged in ``split`` that the corpus lacks, in qrels order (each once)."""
        rows = self.row_of
        qrels = self.qrels(split)
        return list(dict.fromkeys(doc for judged in qrels.values() for doc in judged if doc not in rows))

    @cached_property
    def row_of(self) -> dict[str, int]:
        """Each document id's row in ``corpus``."""
        return {doc_id: row for row, doc_id in enumerate(self.corpus["_id"])}

    def documents(self, doc_ids: Iterable[str], source: str | Path | None = None) -> dict[str, str]:
        """The text (``doc_text``) of each id; an id the corpus lacks is an error naming ``source`` (a run file)."""
        wanted = list(dict.fromkeys(doc_ids))
        missing = [doc_id for doc_id in wanted if doc_id not in self.row_of]
        if missing:
            raise EmbedkitError(
                f"document '{missing[0]}' is not in the corpus of {self.name} ({len(missing)} such ids)",
                path=source or self.corpus_file,
                field="doc id",
            )
        rows = self.corpus.select([self.row_of[doc_id] for doc_id in wanted])
        return {doc_id: doc_text(row) for doc_id, row in zip(wanted, rows)}

    @cached_property
    def corpus_sha256(self) -> str:
        """The content hash of the corpus as encoded (see ``corpus_fingerprint``)."""
        return corpus_fingerprint(self.corpus)

    def qrels_sha256(self, split: str = "test") -> str:
        """A hash of the judgements of ``split`` (reports made on other judgements are not comparable)."""
        qrels = self.qrels(split)
        return sha256_json({query_id: sorted(judged.items()) for query_id, judged in sorted(qrels.items())})

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": str(self.path.resolve()),
            "corpus_sha256": self.corpus_sha256,
            "corpus_file_sha256": sha256_file(self.corpus_file),
            "documents": len(self.corpus),
            "doc_text": DOC_TEXT_RULE,
        }


def load_dataset(name_or_path: str | Path, data_dir: str | Path | None = None) -> BeirDataset:
    """Load a BEIR dataset by folder path or by name (see :func:`resolve_dataset`)."""
    path = resolve_dataset(name_or_path, data_dir=data_dir)
    return BeirDataset(path=path, name=Path(name_or_path).name)
