"""A chunked encode through the whole pipeline: ``encode --chunking`` -> ``index`` -> ``search`` equals ``evaluate``
with the same chunking; ``serve`` answers documents with the scoring chunk's text as the snippet; ``reproduce`` runs a
chunked condition; the report records the chunking and the aggregation."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import embedkit_here
from test_reproduce import _config
from test_serve import running_server

from embedkit import EmbeddingsFolder, evaluate, load_dataset, load_model
from embedkit.data.beir import doc_text
from embedkit.data.trec import read_run
from embedkit.models.chunking import Chunking
from embedkit.search import Dense

CHUNKING = ["--chunking", "sentence", "--chunk-size", "96", "--chunk-overlap", "24"]


@pytest.fixture(scope="module")
def chunked(scifact_subset, tmp_path_factory):
    """The 150-document SciFact cut encoded as sentence chunks and indexed (Flat) through the CLI."""
    root = tmp_path_factory.mktemp("chunked")
    encoded = embedkit_here("encode", "--dataset", scifact_subset, "-o", root / "emb", *CHUNKING)
    assert encoded.returncode == 0, encoded.stderr
    assert "chunks of 150 documents" in encoded.stdout
    indexed = embedkit_here("index", "-e", root / "emb", "-o", root / "idx")
    assert indexed.returncode == 0, indexed.stderr
    return root


def test_search_of_a_chunked_index_equals_evaluate_with_the_same_chunking(chunked, scifact_subset, tmp_path):
    run = tmp_path / "run.trec"
    index = chunked / "idx"
    searched = embedkit_here("search", "-i", index, "-d", scifact_subset, "--split", "test", "-o", run, "-k", 10)
    assert searched.returncode == 0, searched.stderr
    model = load_model(max_length=256, chunking=Chunking("sentence", size=96, overlap=24))
    report = evaluate(model, scifact_subset, "test", "dense", output=tmp_path / "out", cache_dir=tmp_path / "c", k=10)
    assert report["retriever"]["aggregation"] == "maxp"  # the report records how chunks became documents
    assert report["model"]["chunking"] == {"method": "sentence", "size": 96, "overlap": 24}
    ours, theirs = read_run(run), read_run(f"{report['folder']}/run.trec")
    assert ours.keys() == theirs.keys()
    for query in ours:
        assert list(ours[query]) == list(theirs[query]) and len(ours[query]) == 10  # documents, not chunks
        assert not any("#" in doc for doc in ours[query])
        np.testing.assert_allclose(list(ours[query].values()), list(theirs[query].values()), atol=1e-5)
    firstp = embedkit_here(
        "search", "-i", chunked / "idx", "-d", scifact_subset, "-o", tmp_path / "f.trec", "--aggregation", "firstp"
    )
    assert firstp.returncode == 0 and read_run(tmp_path / "f.trec") != ours


def test_serve_answers_documents_with_the_scoring_chunk_as_the_snippet(chunked, scifact_subset, tmp_path):
    from embedkit.index import load_index
    from embedkit.search.chunks import search_chunked

    data = load_dataset(scifact_subset)
    query = data.queries[next(iter(data.qrels("test")))]
    flags = ["--dataset", str(scifact_subset), "--device", "cpu"]
    with running_server(chunked / "idx", tmp_path, *flags) as server:
        response = server.post("/search", {"queries": [query], "k": 5})
        assert server.health()["index"]["aggregation"] == {"method": "maxp"}
    assert response.status_code == 200, response.text
    hits = response.json()["results"][0]["hits"]
    index = load_index(chunked / "idx")
    model = load_model(max_length=256)
    expected = search_chunked(index, model.encode_queries([query]), 5)[0]
    assert [hit["id"] for hit in hits] == [hit.document for hit in expected]
    spans = EmbeddingsFolder.open(chunked / "emb").spans()  # the spans stored at encode time
    for served, hit in zip(hits, expected):
        text = doc_text(data.corpus[data.row_of[hit.document]])
        start, end = spans[hit.chunk].tolist()
        assert served["snippet"] and " ".join(text[start:end].split()).startswith(served["snippet"].removesuffix(" …"))


@pytest.mark.slow  # a third encode of the cut (reproduce's, then evaluate's): make test stays under 25 minutes
def test_reproduce_runs_a_chunked_condition(scifact_subset, tmp_path):
    condition = (
        f"  - id: late\n    dataset: {scifact_subset}\n    retriever: {{type: dense, aggregation: sump}}\n"
        "    model: {max_length: 128, chunking: {method: late, size: 64}}\n"
        "    expected: {ndcg_at_10: 0.0}\n    source: src\n    tolerance: 1.0\n"
    )
    result = embedkit_here("reproduce", "--config", _config(tmp_path, condition), "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    row = json.loads((tmp_path / "out" / "reproduce.json").read_text())["rows"][0]
    model = load_model(max_length=128, chunking={"method": "late", "size": 64})
    expected = evaluate(model, scifact_subset, "test", Dense(aggregation="sump"), cache_dir=tmp_path / "cache")
    assert row["status"] == "pass" and row["metrics"]["ndcg_at_10"]["measured"] == expected["metrics"]["ndcg_at_10"]
