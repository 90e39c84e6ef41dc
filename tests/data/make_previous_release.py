"""Writes ``tests/data/previous_release/``: one tiny index folder per engine as embedkit 0.1.0 (commit c8ae77e) wrote
them, and each one's answers to a few queries, so a later release can prove it still opens and searches them the
same (``tests/test_index_contract.py``). Run once at that commit; the folders are committed, not regenerated."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from embedkit.index import Index
from embedkit.index.multivector_exact import MultiVectorExactIndex
from embedkit.index.multivector_ivf import MultiVectorIVFIndex
from embedkit.index.sparse_exact import SparseExactIndex
from embedkit.multivector import TokenRows
from embedkit.sparse import SparseRows

OUT = Path(__file__).parent / "previous_release"
DOCS, DIM, VOCAB = 40, 8, 50
SETTINGS = {"model": "tiny", "weights_sha256": "0" * 64, "dim": DIM, "max_length": 16, "document_prompt": ""}


def sparse_rows(rng, count):
    rows = []
    for _ in range(count):
        terms = np.sort(rng.choice(VOCAB, size=rng.integers(1, 6), replace=False)).astype(np.int32)
        rows.append((terms, rng.uniform(0.1, 3.0, len(terms)).astype(np.float32)))
    indptr = np.concatenate([[0], np.cumsum([len(t) for t, _ in rows])]).astype(np.int64)
    return SparseRows(indptr, np.concatenate([t for t, _ in rows]), np.concatenate([v for _, v in rows]), VOCAB)


def token_rows(rng, count):
    lengths = rng.integers(1, 6, count)
    vectors = rng.normal(size=(int(lengths.sum()), DIM)).astype(np.float16)
    return TokenRows(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), vectors)


def main() -> None:
    rng = np.random.default_rng(0)
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    ids = [f"d{i}" for i in range(DOCS)]
    answers = {}

    dense = rng.normal(size=(DOCS, DIM)).astype(np.float32)
    dense_queries = rng.normal(size=(3, DIM)).astype(np.float32)
    for name, factory in (("faiss-flat", "Flat"), ("faiss-ivf", "IVF4,Flat")):
        index = Index.build(
            dense, ids, factory=factory, model_settings=SETTINGS, nprobe=4 if "IVF" in factory else None
        )
        index.save(OUT / name)
        scores, hits = Index.load(OUT / name).search(dense_queries, 5)
        answers[name] = {"queries": dense_queries.tolist(), "ids": hits, "scores": scores.tolist()}

    sparse = sparse_rows(rng, DOCS)
    folder = SimpleNamespace(
        sparse=True,
        multivector=False,
        embeddings=lambda: sparse,
        ids=lambda: ids,
        settings={**SETTINGS, "dim": VOCAB},
        path=None,
    )
    SparseExactIndex.build(folder).save(OUT / "sparse-exact")
    queries = sparse_rows(rng, 3)
    found = SparseExactIndex.load(OUT / "sparse-exact").search(queries, 5)
    answers["sparse-exact"] = {"queries": _sparse_json(queries), "hits": found}
    from embedkit.integrations.pyserini_impact import LuceneImpact, build_impact_index
    from embedkit.integrations.seismic import SeismicSparse, build_seismic_index

    query_ids = ["q0", "q1", "q2"]
    build_impact_index(OUT / "sparse-lucene-impact", ids, sparse, names, {**SETTINGS, "dim": VOCAB})
    found = LuceneImpact(OUT / "sparse-lucene-impact").search(query_ids, queries, names, 5)
    answers["sparse-lucene-impact"] = {
        "queries": _sparse_json(queries),
        "hits": [list(found[q].items()) for q in query_ids],
    }
    build_seismic_index(OUT / "sparse-seismic", ids, sparse, {**SETTINGS, "dim": VOCAB})
    found = SeismicSparse(OUT / "sparse-seismic").search(query_ids, queries, None, 5)
    answers["sparse-seismic"] = {"queries": _sparse_json(queries), "hits": [list(found[q].items()) for q in query_ids]}

    tokens = token_rows(rng, DOCS)
    folder = SimpleNamespace(
        sparse=False, multivector=True, embeddings=lambda: tokens, ids=lambda: ids, settings=SETTINGS, path=None
    )
    MultiVectorExactIndex.build(folder).save(OUT / "multivector-exact")
    ivf = MultiVectorIVFIndex.build(folder, lists=4)
    ivf.set_search_params(nprobe=4, candidates=200)
    ivf.save(OUT / "multivector-ivf")
    queries = token_rows(rng, 3)
    for name, cls in (("multivector-exact", MultiVectorExactIndex), ("multivector-ivf", MultiVectorIVFIndex)):
        found = cls.load(OUT / name).search(queries, 5)
        answers[name] = {
            "queries": {"offsets": queries.offsets.tolist(), "vectors": queries.vectors.tolist()},
            "hits": found,
        }
    (OUT / "answers.json").write_text(json.dumps(answers, indent=1) + "\n")
    print(f"wrote {OUT}", file=sys.stderr)


def names(indices):
    return [f"t{i}" for i in indices]


def _sparse_json(rows):
    return {
        "indptr": rows.indptr.tolist(),
        "indices": rows.indices.tolist(),
        "values": rows.values.tolist(),
        "dim": rows.dim,
    }


if __name__ == "__main__":
    main()
