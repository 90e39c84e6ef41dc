"""A Lucene impact index of learned sparse vectors, in pyserini's own layout, so ``LuceneImpactSearcher`` opens it as
it opens the indexes behind pyserini's published SPLADE conditions.

- Weights are quantised by embedkit (``round(w · factor)``, pyserini's SPLADE corpora use ×100): Anserini truncates a
  float weight, and a weight that rounds to 0 is dropped. A document left with no term is not indexed by Lucene; its
  id is recorded (``empty_documents`` in ``meta.json``), so the count of indexed documents is explained.
- Terms are the tokenizer's words (``SparseModel.token_names``), as pyserini's pre-encoded corpora name them.
- Search goes through Anserini's ``SimpleImpactSearcher`` with each query's own quantised vector; Lucene sums
  integer products, so scores equal the exact sparse product of the quantised vectors. Hits are fetched a little
  deeper than ``k`` and cut in ``TIE_BREAK`` order, since Lucene breaks ties by its internal document order.
"""

from __future__ import annotations

import json
import secrets
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from embedkit.data.trec import ranked
from embedkit.errors import EmbedkitError
from embedkit.index.engine import LibraryFolder, open_meta, refuse_filter, write_meta
from embedkit.index.registry import SPARSE_FORMAT
from embedkit.integrations.pyserini import is_lucene_index, start_jvm, versions
from embedkit.outputs import check_output_folder, commit_folder, output_lock, recover
from embedkit.protocols import Capabilities, Hits
from embedkit.sparse import SparseRows
from embedkit.storage import NEW_MARK, read_lines, write_lines
from embedkit.validation import check_whole

IMPACT_KIND = "sparse-index"
FORMAT = SPARSE_FORMAT
ENGINE = "lucene-impact"
TERMS = "terms"  # the term of each dimension, one a line: queries are written in the documents' words
QUANTIZATION = 100
DEPTH_MARGIN = 10  # hits read beyond k; where the last read still ties the k-th, the query is searched deeper


def write_collection(path: Path, doc_ids: Sequence[str], rows: SparseRows, names: Any) -> list[str]:
    """pyserini's ``JsonVectorCollection`` file of quantised rows; returns the ids of documents left empty."""
    empty = []
    with open(path, "w", encoding="utf-8") as handle:
        for i, doc_id in enumerate(doc_ids):
            indices, values = rows.row(i)
            if not len(indices):
                empty.append(doc_id)
                continue
            vector = dict(zip(names(indices), (int(v) for v in values), strict=True))
            handle.write(json.dumps({"id": doc_id, "contents": "", "vector": vector}) + "\n")
    return empty


def build_impact_index(
    folder: str | Path,
    doc_ids: Sequence[str],
    rows: SparseRows,
    names: Any,
    settings: dict[str, Any],
    *,
    quantization: float = QUANTIZATION,
    overwrite: bool = False,
    threads: int = 1,
) -> Path:
    """Build the index in a folder beside ``folder`` and swap it in whole; ``names`` maps dimensions to terms."""
    folder = Path(folder).absolute()
    quantised = rows.quantized(quantization)
    with output_lock(folder):
        recover(folder)
        check_output_folder(folder, IMPACT_KIND, overwrite)
        start_jvm()
        from jnius import autoclass

        work = folder.parent / f".{folder.name}{NEW_MARK}{secrets.token_hex(4)}"
        (work / "collection").mkdir(parents=True)
        try:
            empty = write_collection(work / "collection" / "vectors.jsonl", doc_ids, quantised, names)
            args = ["-collection", "JsonVectorCollection", "-input", str(work / "collection"), "-index"]
            args += [str(work / "index"), "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads)]
            autoclass("io.anserini.index.IndexCollection").main([*args, "-impact", "-pretokenized", "-quiet"])
            write_lines(work / "index" / TERMS, names(range(rows.dim)))
            write_lines(work / "index" / "docid", doc_ids)  # the ids, for a living index and chunk rows
            write_meta(work / "index", {
                "format": FORMAT,
                "engine": ENGINE,
                "documents": len(doc_ids),
                "indexed": len(doc_ids) - len(empty),
                "empty_documents": empty,
                "quantization": quantization,
                "nnz": quantised.nnz,
                "settings": settings,
                **versions(),
            })  # fmt: skip
            commit_folder(work / "index", folder)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return folder


class LuceneImpact(LibraryFolder):
    """Searches an impact index with sparse query vectors (quantised as its documents were)."""

    engine: ClassVar[str] = ENGINE
    family: ClassVar[str] = "sparse"
    search_parameters: ClassVar[tuple[str, ...]] = ()
    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(self, folder: str | Path, threads: int = 1) -> None:
        self.folder = Path(folder)
        meta = open_meta(self.folder, FORMAT, ENGINE, (), "an embedkit Lucene impact index")
        if not is_lucene_index(self.folder):
            raise EmbedkitError("not an embedkit Lucene impact index", path=self.folder, field="--index")
        self.meta, self.threads = meta, threads
        # folders written before the terms were recorded take them from the model (``bind_model``)
        self.term_names = _recorded_names(read_lines(self.folder / TERMS)) if (self.folder / TERMS).is_file() else None
        start_jvm()
        from jnius import autoclass

        self.searcher = autoclass("io.anserini.search.SimpleImpactSearcher")(str(self.folder))

    def bind_model(self, model: Any) -> None:
        """Name query terms with the model's vocabulary where the folder does not record its terms."""
        if self.term_names is None:
            self.term_names = model.token_names

    @classmethod
    def from_rows(cls, rows: SparseRows, ids: list[str], settings: dict[str, Any], like: Any = None):
        """A new index of these rows (a compaction's); ``like`` gives the quantisation and the terms."""
        quantization = like.meta["quantization"]
        return cls.in_scratch(lambda folder: build_impact_index(folder, ids, rows, like.term_names, settings,
                                                                quantization=quantization))  # fmt: skip

    def search(self, rows: SparseRows, k: int, *, filter: str | None = None) -> Hits:
        from jnius import autoclass

        check_whole(k, "k", minimum=1)
        refuse_filter(filter, "Lucene impact")
        if self.term_names is None:
            raise EmbedkitError("this index lists no terms (built before 0.2): search it through its model, whose "
                                "check(index) gives the vocabulary", path=self.folder)  # fmt: skip
        names = self.term_names
        query_ids = [str(i) for i in range(len(rows))]
        quantised = rows.quantized(self.meta["quantization"])
        vectors, ids = autoclass("java.util.ArrayList")(), autoclass("java.util.ArrayList")()
        hashmap, integer = autoclass("java.util.HashMap"), autoclass("java.lang.Integer")
        for i, query_id in enumerate(query_ids):
            indices, values = quantised.row(i)
            vector = hashmap()
            for term, value in zip(names(indices), values, strict=True):
                vector.put(term, integer(int(value)))
            vectors.add(vector)
            ids.add(query_id)
        depth = int(k) + DEPTH_MARGIN
        found = self.searcher.batch_search(vectors, ids, depth, int(self.threads))
        hits = {q: {h.docid: float(h.score) for h in found_hits} for q, found_hits in _entries(found)}
        for i, query_id in enumerate(query_ids):  # ties at the k-th place past the depth read: read deeper
            deeper = depth
            while _tied_past(hits.get(query_id, {}), k, deeper):
                deeper *= 4
                hits[query_id] = {h.docid: float(h.score) for h in self.searcher.search(vectors.get(i), deeper)}
        return Hits.from_ranked([ranked(hits.get(q, {}))[:k] for q in query_ids], k)


def _recorded_names(terms: list[str]) -> Any:
    return lambda indices: [terms[int(i)] for i in indices]


def _entries(found: Any) -> list[tuple[str, Any]]:
    return [(entry.getKey(), entry.getValue()) for entry in found.entrySet().toArray()]


def _tied_past(hits: dict[str, float], k: int, depth: int) -> bool:
    """Whether Lucene may have cut documents scoring as the k-th does: it returned all it was asked for, and the
    last of them ties the k-th (trec_eval's order among ties is doc id, Lucene's is its own)."""
    if len(hits) < depth or len(hits) <= k:
        return False
    scores = sorted(hits.values(), reverse=True)
    return scores[-1] == scores[k - 1]
