"""The composition matrix: every family x an exact and an approximate engine x built or living (after 200 seeded
adds, deletes and upserts of documents; a chunked document's rows follow it) x whole documents or chunks x alone or
fused with BM25 x with or without a metadata filter. Each cell's top 10 is checked against an oracle computed here
with numpy from the raw rows (exact engines:
ids, order and scores; approximate ones: recall@10 against the oracle, at least 0.9). A cell that cannot be built is
refused with one line, and its reason is listed in ``docs/concepts/composition.md``.
"""

from __future__ import annotations

import itertools
import json
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import write_jsonl, write_qrels

from embedkit.errors import EmbedkitError
from embedkit.index import Index, open_index
from embedkit.index.multivector_exact import MultiVectorExactIndex
from embedkit.index.multivector_ivf import MultiVectorIVFIndex
from embedkit.index.registry import open_live
from embedkit.index.sparse_exact import SparseExactIndex
from embedkit.multivector import TokenRows
from embedkit.rows import row_format
from embedkit.search.chunks import split_chunk_id
from embedkit.search.fusion import fuse
from embedkit.search.queries import hits_to_run, search_documents
from embedkit.sparse import SparseRows

DOCS, QUERIES, DIM, VOCAB, K, CHANGES = 240, 12, 16, 120, 10, 200
WORDS = [f"w{i}" for i in range(60)]
FILTER = "year >= 2010"
DOCS_PAGE = Path(__file__).parents[1] / "docs" / "concepts" / "composition.md"
FAMILIES, ENGINES = ("dense", "sparse", "multivector"), ("exact", "approximate")
CELLS = list(itertools.product(FAMILIES, ENGINES, ("built", "living"), ("whole", "chunked"), ("alone", "bm25"),
                               ("all", "filter")))  # fmt: skip


def _rows(family: str, rng: np.random.Generator, count: int):
    if family == "dense":
        rows = rng.normal(size=(count, DIM)).astype(np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)
    if family == "sparse":
        terms = [np.sort(rng.choice(VOCAB, size=rng.integers(3, 12), replace=False)) for _ in range(count)]
        indptr = np.concatenate([[0], np.cumsum([len(t) for t in terms])]).astype(np.int64)
        values = rng.uniform(0.1, 2.0, int(indptr[-1])).astype(np.float32)
        return SparseRows(indptr, np.concatenate(terms).astype(np.int32), values, VOCAB)
    lengths = rng.integers(2, 7, count)
    vectors = rng.normal(size=(int(lengths.sum()), DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return TokenRows(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), vectors.astype(np.float16))


SETTINGS = {"model": "matrix", "weights_sha256": "0" * 64, "max_length": 32, "document_prompt": "", "dim": DIM}


def _build(family: str, engine: str, rows, ids: list[str], folder: Path, chunked: bool):
    settings = {**SETTINGS, "kind": family, **({"chunking": {"method": "window", "size": 8, "overlap": 0}}
                                              if chunked else {})}  # fmt: skip
    if family == "dense":
        factory = "Flat" if engine == "exact" else "HNSW16"
        index = Index.build(rows, ids, factory, model_settings=settings, ef_search=None if engine == "exact" else 128)
    elif family == "sparse" and engine == "exact":
        index = SparseExactIndex.from_rows(rows, ids, settings)
    elif family == "sparse":
        from embedkit.integrations.seismic import SeismicSparse, build_seismic_index

        build_seismic_index(folder, ids, rows, settings)
        return SeismicSparse(folder, query_cut=VOCAB, heap_factor=1.0)
    elif engine == "exact":
        index = MultiVectorExactIndex.from_rows(rows, ids, settings)
    else:
        index = MultiVectorIVFIndex.of(MultiVectorExactIndex(rows, ids, settings), lists=8)
        index.set_search_params(nprobe=4, candidates=256)
    index.save(folder)
    return open_index(folder)


class Corpus:
    """One family's documents (whole or as chunks), queries, texts for BM25 and metadata, all seeded."""

    def __init__(self, family: str, chunked: bool, root: Path) -> None:
        rng = np.random.default_rng(["dense", "sparse", "multivector"].index(family) + 10 * chunked)
        self.family, self.format = family, row_format(family)
        self.doc_ids = [f"d{i:03d}" for i in range(DOCS)]
        counts = rng.integers(1, 4, DOCS) if chunked else np.ones(DOCS, int)
        self.row_ids = [f"{d}#{n}" if chunked else d for d, c in zip(self.doc_ids, counts) for n in range(c)]
        self.rows = _rows(family, rng, len(self.row_ids))
        self.queries = _rows(family, rng, QUERIES)
        self.years: dict[str, int] = {}  # metadata: only what the changes give (a snapshot's documents have none)
        self.texts = {d: " ".join(rng.choice(WORDS, 12)) for d in self.doc_ids}
        self.query_texts = {f"q{i}": " ".join(rng.choice(WORDS, 3)) for i in range(QUERIES)}
        self.data = root / f"data-{family}-{chunked}"
        write_jsonl(self.data / "corpus.jsonl", [{"_id": d, "title": "", "text": t} for d, t in self.texts.items()])
        write_jsonl(self.data / "queries.jsonl", [{"_id": q, "text": t} for q, t in self.query_texts.items()])
        write_qrels(self.data / "qrels" / "test.tsv", [(q, "d000", 1) for q in self.query_texts])

    def change(self, live, seed: int) -> None:
        """``CHANGES`` seeded adds, deletes and upserts of documents through the index (a chunked document's rows
        go with it), mirrored in this corpus's rows."""
        from embedkit.models.chunking import Chunks

        rng, chunked = np.random.default_rng(seed), "#" in self.row_ids[0]
        table: dict[str, list] = {}
        for i, row_id in enumerate(self.row_ids):
            table.setdefault(row_id.rpartition("#")[0] if chunked else row_id, []).append(
                self.format.take(self.rows, [i])
            )
        for step in range(CHANGES):
            action = ("add", "delete", "upsert")[step % 3]
            doc_id = f"n{step:03d}" if action == "add" else sorted(table)[int(rng.integers(len(table)))]
            if action == "delete":
                live.delete([doc_id])
                del table[doc_id]
                continue
            count = int(rng.integers(1, 4)) if chunked else 1
            new_rows = _rows(self.family, rng, count)
            given = Chunks(new_rows, np.zeros((count, 2), np.int64), np.array([count])) if chunked else new_rows
            year = int(rng.integers(2000, 2020))
            (live.add if action == "add" else live.upsert)([doc_id], given, metadata=[{"year": year}])
            table[doc_id] = [self.format.take(new_rows, [j]) for j in range(count)]
            self.years[doc_id] = year
        self.doc_ids = sorted(table)
        self.row_ids = [f"{d}#{n}" if chunked else d for d in self.doc_ids for n in range(len(table[d]))]
        parts = [row for d in self.doc_ids for row in table[d]]
        self.rows = self.format.stack(parts, DIM if self.family != "sparse" else VOCAB, {"token_dtype": "float16"})

    def oracle(self, filtered: bool) -> dict[str, dict[str, float]]:
        """Brute force: every row scored with numpy (no embedkit search code), MaxP per document, the top 10."""
        queries, rows = self.queries, self.rows
        if self.family == "dense":
            scores = queries @ rows.T
        elif self.family == "sparse":
            scores = queries.to_scipy().toarray() @ rows.to_scipy().toarray().T
        else:
            scores = np.zeros((len(queries), len(rows)), np.float32)
            for i in range(len(queries)):
                q = queries.row(i).astype(np.float32)
                for j in range(len(rows)):
                    scores[i, j] = (q @ rows.row(j).astype(np.float32).T).max(axis=1).sum()
        run = {}
        for i in range(len(queries)):
            best: dict[str, float] = {}
            for row_id, score in zip(self.row_ids, scores[i]):
                document = split_chunk_id(row_id)[0] if "#" in row_id else row_id
                if (filtered and self.years.get(document, 0) < 2010) or (self.family == "sparse" and score <= 0):
                    continue
                best[document] = max(best.get(document, -np.inf), float(score))
            run[f"q{i}"] = dict(sorted(best.items(), key=lambda h: (h[1], h[0]), reverse=True)[:K])
        return run


def _rrf(runs: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Reciprocal-rank fusion by hand (k = 60, ranks from 1, ties in trec_eval's order), the top 10."""
    fused = {}
    for query in runs[0]:
        total: dict[str, float] = {}
        for run in runs:
            ordered = sorted(run.get(query, {}).items(), key=lambda h: (h[1], h[0]), reverse=True)
            for rank, (doc, _) in enumerate(ordered, start=1):
                total[doc] = total.get(doc, 0.0) + 1.0 / (60 + rank)
        fused[query] = dict(sorted(total.items(), key=lambda h: (h[1], h[0]), reverse=True)[:K])
    return fused


REFUSALS = {("built", "filter"): "holds no metadata to filter by"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Each (family, engine, built or living, whole or chunked) index and its corpus, made once."""
    root, made = tmp_path_factory.mktemp("matrix"), {}

    def get(family: str, engine: str, state: str, chunks: str):
        key = (family, engine, state, chunks)
        if key not in made:
            corpus = Corpus(family, chunks == "chunked", root)
            folder = root / "-".join(key)
            index = _build(family, engine, corpus.rows, corpus.row_ids, folder, chunks == "chunked")
            if state == "living":
                try:
                    index = open_live(folder, fields={"year": "int"}, vectors=corpus.rows)
                except EmbedkitError as err:
                    made[key] = (err, corpus)
                    return made[key]
                corpus.change(index, seed=zlib.crc32("-".join(key).encode()))
            made[key] = (index, corpus)
        return made[key]

    return get


RESULTS: dict[str, dict] = {}


@pytest.mark.parametrize("cell", CELLS, ids=["-".join(cell) for cell in CELLS])
def test_cell(cell, built):
    family, engine, state, chunks, fused, filtering = cell
    index, corpus = built(family, engine, state, chunks)
    refusal = REFUSALS.get((state, filtering))
    if refusal is not None:
        with pytest.raises(EmbedkitError, match=refusal) as refused:
            if isinstance(index, EmbedkitError):
                raise index
            search_documents(index, corpus.queries, K, filter=FILTER if filtering == "filter" else None)
        assert "\n" not in str(refused.value)
        assert refusal in DOCS_PAGE.read_text(), f"docs/concepts/composition.md does not list '{refusal}'"
        RESULTS["-".join(cell)] = {"refused": refusal}
        return
    assert not isinstance(index, EmbedkitError), index
    options = {"filter": FILTER} if filtering == "filter" else {}
    query_ids = [f"q{i}" for i in range(QUERIES)]
    run = hits_to_run(search_documents(index, corpus.queries, K, **options), query_ids, K)
    expected = corpus.oracle(filtering == "filter")
    if fused == "bm25":
        from embedkit.data.beir import load_dataset
        from embedkit.search.bm25 import bm25_searcher

        lexical = bm25_searcher(load_dataset(corpus.data), "bm25s").search(corpus.query_texts, 100)
        if filtering == "filter":
            lexical = {q: {d: s for d, s in hits.items() if corpus.years.get(d, 0) >= 2010}
                       for q, hits in lexical.items()}  # fmt: skip
        run = fuse([run, lexical], "rrf", depth=100, k=K)
        expected = _rrf([expected, lexical])
    recalls = [len(set(run[q]) & set(expected[q])) / max(1, len(expected[q])) for q in query_ids]
    RESULTS["-".join(cell)] = {"recall_at_10": float(np.mean(recalls))}
    if engine == "exact":
        for q in query_ids:
            assert list(run[q]) == list(expected[q]), (q, run[q], expected[q])
            assert np.allclose(list(run[q].values()), list(expected[q].values()), rtol=1e-5, atol=1e-6)
    else:
        assert np.mean(recalls) >= 0.9, np.mean(recalls)


def test_the_matrix_counts_its_cells():
    """Run last in the module: how many cells work and how many are refused (printed for the record)."""
    if len(RESULTS) != len(CELLS):
        pytest.skip("the cells ran in another worker or were deselected")
    working = sum("refused" not in result for result in RESULTS.values())
    approximate = {cell: result["recall_at_10"] for cell, result in RESULTS.items() if "-approximate-" in cell
                   and "recall_at_10" in result}  # fmt: skip
    print(json.dumps({"cells": len(CELLS), "working": working, "refused": len(CELLS) - working,
                      "approximate_recall_at_10": approximate}))  # fmt: skip
    assert working >= 72
