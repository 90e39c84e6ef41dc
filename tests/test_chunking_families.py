"""Chunking for every family: a sparse and a multi-vector model cut documents into window or sentence chunks, the
chunk rows go through the same shards and index engines as whole documents, and a search gives each document its
best chunk's score (MaxP) before the top-k, as brute force over every chunk followed by MaxP does."""

from __future__ import annotations

import numpy as np
import pytest

from embedkit import load_dataset, load_model
from embedkit.encode import encode_to_folder
from embedkit.errors import EmbedkitError
from embedkit.index import open_index
from embedkit.index.multivector_exact import MultiVectorExactIndex
from embedkit.index.sparse_exact import SparseExactIndex
from embedkit.models.chunking import Chunking
from embedkit.rows import row_format
from embedkit.search.chunks import split_chunk_id
from embedkit.search.queries import search_queries


@pytest.mark.parametrize("family", ["sparse", "multivector"])
def test_chunked_search_equals_brute_force_over_chunks_then_maxp(family, splade_folder, colbert_folder,
                                                                  scifact_subset, tmp_path):  # fmt: skip
    folder, build = (splade_folder, SparseExactIndex) if family == "sparse" else (colbert_folder, MultiVectorExactIndex)
    options = {"max_active_dims": 32} if family == "sparse" else {}
    model = load_model(folder, chunking=Chunking("sentence", size=48, overlap=8), **options)
    assert model.settings["chunking"]["method"] == "sentence"
    data = load_dataset(scifact_subset)
    corpus = data.corpus.select(range(16))
    embeddings = encode_to_folder(model, corpus, tmp_path / "emb", shard_size=8)
    assert embeddings.manifest["documents"] == 16 and embeddings.manifest["count"] > 16  # more chunks than documents
    chunk_ids = embeddings.ids()
    assert {split_chunk_id(row)[0] for row in chunk_ids} == set(corpus["_id"])
    index = open_index(build.build(embeddings).save(tmp_path / "idx"))
    queries = dict(list(data.split_queries("test").items())[:5])
    run, rows = search_queries(model, index, queries, 10)
    scores = row_format(family).score(rows, embeddings.embeddings())
    for i, query_id in enumerate(queries):
        best: dict[str, float] = {}
        for row_id, score in zip(chunk_ids, scores[i]):
            document = split_chunk_id(row_id)[0]
            if score > 0 or family != "sparse":
                best[document] = max(best.get(document, -np.inf), float(score))
        expected = sorted(best.items(), key=lambda hit: (hit[1], hit[0]), reverse=True)[:10]
        got = list(run[query_id].items())
        assert [doc for doc, _ in got] == [doc for doc, _ in expected]
        assert np.allclose([s for _, s in got], [s for _, s in expected], rtol=1e-5)
    from embedkit.serving.sparse_engine import SparseEngine

    served = SparseEngine(model, index)._search(rows, 10)  # what serve's /search answers: documents, not chunks
    assert [[doc for doc, _ in hits] for hits in served] == [list(run[query_id]) for query_id in queries]


def test_late_chunking_is_a_dense_models_and_says_so(splade_folder):
    with pytest.raises(EmbedkitError, match="late chunking pools a dense model's token vectors"):
        load_model(splade_folder, chunking=Chunking("late", size=48))
