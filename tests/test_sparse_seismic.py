"""Seismic (``embedkit[seismic]``): an approximate learned-sparse index, checked against the exact one on real
SPLADE vectors of SciFact, through the library and the CLI."""

from __future__ import annotations

import numpy as np

from embedkit import load_model
from embedkit.encode import encode_to_folder
from embedkit.index.sparse_exact import SparseExactIndex
from embedkit.integrations.seismic import SeismicSparse, build_seismic_index
from embedkit.sparse import SparseRows


def test_seismic_finds_the_exact_top_10_and_its_scores(splade_folder, scifact, tmp_path):
    model = load_model(splade_folder, max_length=32, max_active_dims=48)
    corpus = scifact.corpus.select(range(200))
    embeddings = encode_to_folder(model, corpus, tmp_path / "emb")
    build_seismic_index(tmp_path / "idx", embeddings.ids(), embeddings.embeddings(), embeddings.settings)
    # every query term read and no block skipped that could still enter the top k: Seismic is then exact but for
    # its weights' precision (the defaults cut queries to 10 terms, which flat untrained vectors do not survive)
    seismic = SeismicSparse(tmp_path / "idx", query_cut=48, heap_factor=1.0)
    exact = SparseExactIndex.build(embeddings)
    queries = scifact.split_queries("test")
    query_ids = list(queries)[:40]
    vectors = model.encode_queries([queries[q] for q in query_ids])
    found = seismic.search(vectors, 10).to_run(query_ids)
    truths = exact.search(vectors, 10)
    recall = []
    for query_id, truth in zip(query_ids, (truths.ranked(i) for i in range(len(query_ids))), strict=True):
        hits = found[query_id]
        assert list(hits.values()) == sorted(hits.values(), reverse=True)  # re-ranked: Seismic's order is its own
        truth = dict(truth)
        recall.append(len(set(hits) & set(truth)) / len(truth))
        for doc_id in set(hits) & set(truth):  # its weights are stored at reduced precision
            assert np.isclose(hits[doc_id], truth[doc_id], rtol=1e-2)
    assert np.mean(recall) >= 0.97, np.mean(recall)
    nothing = SparseRows(np.array([0, 0]), np.zeros(0, np.int32), np.zeros(0, np.float32), dim=vectors.dim)
    assert seismic.search(nothing, 10).to_run(["empty"]) == {"empty": {}}


def test_the_cli_builds_and_searches_a_seismic_index(splade_folder, scifact, tmp_path):
    from conftest import SCIFACT, embedkit_here

    model = load_model(splade_folder, max_length=32, max_active_dims=32)
    encode_to_folder(model, scifact.corpus.select(range(50)), tmp_path / "emb", shard_size=16)
    built = embedkit_here(
        "index", "-e", str(tmp_path / "emb"), "-o", str(tmp_path / "idx"), "--sparse-index", "seismic"
    )
    assert built.returncode == 0, built.stderr
    searched = embedkit_here("search", "-i", str(tmp_path / "idx"), "-d", str(SCIFACT), "--split", "test", "-k", "3",
                             "-o", str(tmp_path / "run.trec"))  # fmt: skip
    assert searched.returncode == 0, searched.stderr
    assert len((tmp_path / "run.trec").read_text().splitlines()) > 600
    refused = embedkit_here("index", "-e", str(tmp_path / "emb"), "-o", str(tmp_path / "q"), "--sparse-index",
                            "seismic", "--quantization", "10")  # fmt: skip
    assert refused.returncode == 2 and "--quantization" in refused.stderr
