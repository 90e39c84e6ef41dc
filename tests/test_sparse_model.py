"""A sparse model is a model like any other: ``load_model`` loads a SparseEncoder folder (SPLADE here, started from
the default model, whose MLM head is initialised with the decoder tied to the word embeddings), records its settings
and weights, and its vectors are sentence-transformers' own."""

from __future__ import annotations

import numpy as np
import pytest

from embedkit import load_model
from embedkit.sparse import SparseRows

TEXTS = ["what causes fever?", "Aspirin lowers the risk of colorectal cancer.", ""]


def test_load_model_gives_the_sparse_encoders_own_vectors(splade_folder):
    from sentence_transformers.sparse_encoder import SparseEncoder

    model = load_model(splade_folder)
    assert model.kind == "sparse" and model.settings["sparse_kind"] == "splade" and model.dim == 30522
    assert model.settings["weights_sha256"] and model.max_length == 64
    reference = SparseEncoder(str(splade_folder))
    for ours, theirs in (
        (model.encode_queries(TEXTS), reference.encode_query(TEXTS, convert_to_sparse_tensor=True)),
        (model.encode_documents(TEXTS), reference.encode_document(TEXTS, convert_to_sparse_tensor=True)),
    ):
        expected = SparseRows.from_torch(theirs)
        assert len(ours) == len(TEXTS) and np.array_equal(ours.indptr, expected.indptr)
        assert np.array_equal(ours.indices, expected.indices)
        assert np.allclose(ours.values, expected.values, rtol=0, atol=1e-5)
        dense = theirs.to_dense().numpy()
        assert np.allclose(ours.to_scipy().toarray(), dense, rtol=0, atol=1e-5)  # nothing dropped or moved


def test_sparse_rows_stack_take_and_quantise():
    import torch

    dense = torch.tensor([[0.0, 1.234, 0.0, 0.004], [0.0, 0.0, 0.0, 0.0], [2.5, 0.0, 0.006, 0.0]])
    rows = SparseRows.from_torch(dense.to_sparse())
    assert rows.nnz == 4 and np.array_equal(rows.indptr, [0, 2, 2, 4])
    both = SparseRows.vstack([rows, rows.take([2, 0])])
    assert len(both) == 5 and np.allclose(both.to_scipy().toarray()[3:], dense.numpy()[[2, 0]])
    quantised = rows.quantized(100)  # round(w · 100); 0.004 -> 0 is dropped, 0.006 -> 1 kept
    assert np.array_equal(quantised.indptr, [0, 1, 1, 3]) and np.array_equal(quantised.values, [123, 250, 1])


def test_a_sparse_model_refuses_dense_only_settings(splade_folder):
    from embedkit import EmbedkitError

    with pytest.raises(EmbedkitError, match="is a sparse model"):
        load_model(splade_folder, pooling="mean")


def test_a_sparse_model_reads_up_to_its_position_table_not_its_saved_length(splade_folder):
    """Saved with 64 tokens (as a run trained at 64 is), it still reads 512, and no more."""
    from embedkit import EmbedkitError

    text = ["fever " * 300]
    assert load_model(splade_folder).settings["max_length"] == 64
    longer, saved = load_model(splade_folder, max_length=512), load_model(splade_folder)
    assert longer.settings["max_length"] == 512
    assert not np.array_equal(longer.encode_documents(text).values, saved.encode_documents(text).values)
    with pytest.raises(EmbedkitError, match="at most 512"):
        load_model(splade_folder, max_length=513)


def test_a_sparse_encode_writes_verified_shards_and_resumes_them(splade_folder, scifact, tmp_path):
    """Three sparse shards (indptr, indices, values in one .npz each, hashed in the manifest); a shard lost as a kill
    loses it is re-encoded to the same bytes, the others reused."""
    from embedkit.encode import EmbeddingsFolder, encode_to_folder

    model = load_model(splade_folder, max_length=32)
    corpus = scifact.corpus.select(range(10))
    built = encode_to_folder(model, corpus, tmp_path / "emb", shard_size=4)
    assert built.sparse and built.manifest["dim"] == 30522 and built.encoded_shards == 3
    rows = built.embeddings()
    expected = model.encode_corpus(corpus)
    assert np.array_equal(rows.indptr, expected.indptr) and np.array_equal(rows.indices, expected.indices)
    assert np.array_equal(rows.values, expected.values) and built.ids() == list(corpus["_id"])
    first = {p.name: p.read_bytes() for p in (tmp_path / "emb").glob("shard-*")}
    (tmp_path / "emb" / "shard-00001.npz").unlink()
    manifest = built.manifest | {"shards": [s for s in built.manifest["shards"] if s["index"] != 1], "complete": False}
    (tmp_path / "emb" / "manifest.json").write_text(__import__("json").dumps(manifest))
    again = encode_to_folder(model, corpus, tmp_path / "emb", shard_size=4)
    assert again.encoded_shards == 1
    assert {p.name: p.read_bytes() for p in (tmp_path / "emb" / "").glob("shard-*")} == first
    assert EmbeddingsFolder.open(tmp_path / "emb").embeddings().nnz == rows.nnz


def test_the_exact_sparse_index_ranks_as_the_dense_product_does(splade_folder, scifact, tmp_path):
    """Built from the shards, saved and loaded, it returns for each query the top 10 of the dense dot products, ties
    by document id descending as trec_eval breaks them."""
    from embedkit.encode import encode_to_folder
    from embedkit.index.sparse_exact import SparseExactIndex

    model = load_model(splade_folder, max_length=32)
    corpus = scifact.corpus.select(range(40))
    index = SparseExactIndex.build(encode_to_folder(model, corpus, tmp_path / "emb", shard_size=16))
    loaded = SparseExactIndex.open(index.save(tmp_path / "idx"))
    queries = list(scifact.split_queries("test").values())[:5]
    vectors = model.encode_queries(queries)
    scores = vectors.to_scipy().toarray().astype(np.float64) @ index.documents.toarray().astype(np.float64).T
    ids = list(corpus["_id"])
    found = loaded.search(vectors, 10)
    for row, hits in zip(scores, (found.ranked(i) for i in range(len(vectors))), strict=True):
        by_id = {ids[j]: float(row[j]) for j in range(len(ids))}
        expected = sorted(((d, s) for d, s in by_id.items() if s > 0), key=lambda h: (h[1], h[0]), reverse=True)[:10]
        assert np.allclose([s for _, s in hits], [s for _, s in expected], rtol=1e-5)
        for (doc, _), (want, score) in zip(hits, expected, strict=True):  # a swap only within float32's rounding
            assert doc == want or np.isclose(by_id[doc], score, rtol=1e-5), (doc, want)


def test_the_lucene_impact_index_returns_the_exact_top_10_of_the_quantised_vectors(splade_folder, scifact, tmp_path):
    """embedkit's impact index, and pyserini's LuceneImpactSearcher opened by hand on it, rank as the exact product
    of the quantised vectors (×100) does, ties by document id descending."""
    from embedkit.data.trec import top_hits
    from embedkit.integrations.pyserini import _openai_key_for_import
    from embedkit.integrations.pyserini_impact import LuceneImpact, build_impact_index

    model = load_model(splade_folder, max_length=32, max_active_dims=48)  # an untrained head weighs every word
    corpus = scifact.corpus.select(range(60))
    documents, ids = model.encode_corpus(corpus), list(corpus["_id"])
    folder = build_impact_index(tmp_path / "impact", ids, documents, model.token_names, model.settings)
    queries = list(scifact.split_queries("test").values())[:6]
    query_ids = [f"q{i}" for i in range(len(queries))]
    vectors = model.encode_queries(queries)
    run = LuceneImpact(folder).search(vectors, 10).to_run(query_ids)
    exact = vectors.quantized(100).to_scipy() @ documents.quantized(100).to_scipy().T
    with _openai_key_for_import():
        from pyserini.search.lucene import LuceneImpactSearcher

    class OwnVector:
        def __init__(self, row):
            indices, values = vectors.quantized(100).row(row)
            self.vector = dict(zip(model.token_names(indices), map(int, values), strict=True))

        def encode(self, text, **_):
            return self.vector

    for i, query_id in enumerate(query_ids):
        expected = top_hits(exact[i].toarray()[0].astype(np.float32), ids, 10)
        assert list(run[query_id].items()) == expected
        by_hand = LuceneImpactSearcher(str(folder), OwnVector(i)).search("unused", k=30)
        scores = np.array([hit.score for hit in by_hand], np.float32)
        assert top_hits(scores, [hit.docid for hit in by_hand], 10) == expected


def test_evaluate_with_a_sparse_model_on_the_exact_and_the_impact_index(splade_folder, scifact_subset, tmp_path):
    """`evaluate --retriever splade` end to end; the impact index ranks each query's top 10 as the exact index does,
    up to the weight quantisation (agreement measured); a dense model is refused for it, a sparse one for dense."""
    from embedkit import EmbedkitError, evaluate
    from embedkit.search import Sparse

    model = load_model(splade_folder, max_length=32, max_active_dims=48)
    reports = {
        index: evaluate(model, scifact_subset, "test", Sparse(index=index), cache_dir=tmp_path, k=10)
        for index in ("exact", "impact")
    }
    exact, impact = (reports[name]["metrics"]["ndcg_at_10"] for name in ("exact", "impact"))
    assert reports["exact"]["model"]["kind"] == "sparse" and exact > 0 and abs(exact - impact) < 0.05
    recorded = reports["exact"]["retrieval"]["sparse"]
    assert recorded["document_nnz"]["max"] == 48 and 0 < recorded["query_nnz"]["mean"] <= 48
    with pytest.raises(EmbedkitError, match="is a dense model"):
        evaluate(load_model(), scifact_subset, "test", Sparse(), cache_dir=tmp_path)
    with pytest.raises(EmbedkitError, match="is a sparse model"):
        evaluate(model, scifact_subset, "test", "dense", cache_dir=tmp_path)


def test_evaluate_command_runs_splade_and_refuses_other_retrievers_flags(splade_folder, scifact_subset, tmp_path):
    from conftest import embedkit_here

    common = ["evaluate", "-d", str(scifact_subset), "-o", str(tmp_path / "runs"), "--cache-dir", str(tmp_path)]
    done = embedkit_here(*common, "-m", str(splade_folder), "--retriever", "splade", "--max-length", "24", "-k", "10")
    assert done.returncode == 0, done.stderr
    assert "nDCG@10 = " in done.stdout and "splade-exact" in done.stdout
    for extra, message in (
        (["--retriever", "splade", "--factory", "HNSW32"], "--factory"),
        (["--retriever", "splade", "--quantization", "100"], "--quantization"),
        (["--retriever", "dense", "--sparse-index", "impact"], "--sparse-index"),
        (["--retriever", "splade", "--sparse-index", "faiss"], "--sparse-index"),
    ):
        refused = embedkit_here(*common, "-m", str(splade_folder), *extra)
        assert refused.returncode == 2 and message in refused.stderr and len(refused.stderr.strip().splitlines()) == 1


def test_the_index_command_builds_sparse_indexes_and_refuses_the_other_kinds_flags(splade_folder, scifact, tmp_path):
    from conftest import SCIFACT, embedkit_here

    from embedkit.encode import EmbeddingsFolder, encode_to_folder
    from embedkit.index.sparse_exact import SparseExactIndex
    from embedkit.integrations.pyserini_impact import LuceneImpact

    model = load_model(splade_folder, max_length=32, max_active_dims=32)
    corpus = scifact.corpus.select(range(30))
    encode_to_folder(model, corpus, tmp_path / "emb", shard_size=16)
    ids = set(corpus["_id"])
    done = embedkit_here("index", "-e", str(tmp_path / "emb"), "-o", str(tmp_path / "idx"), "--sparse-index", "impact")
    assert done.returncode == 0, done.stderr
    assert LuceneImpact(tmp_path / "idx").meta["indexed"] == 30
    for extra, message in ((["--factory", "HNSW32"], "--factory"), (["--quantization", "10"], "--quantization")):
        refused = embedkit_here("index", "-e", str(tmp_path / "emb"), "-o", str(tmp_path / "exact"), *extra)
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr
    again = embedkit_here("index", "-e", str(tmp_path / "emb"), "-o", str(tmp_path / "idx"))
    assert again.returncode == 2 and "--overwrite" in again.stderr
    args = ["search", "-i", str(tmp_path / "idx"), "-d", str(SCIFACT), "--split", "test", "-k", "5"]
    searched = embedkit_here(*args, "-o", str(tmp_path / "run.trec"))
    assert searched.returncode == 0, searched.stderr
    lines = (tmp_path / "run.trec").read_text().splitlines()
    queries = scifact.split_queries("test")
    exact = SparseExactIndex.build(EmbeddingsFolder.open(tmp_path / "emb")).search(
        model.encode_queries(list(queries.values())), 5
    )
    found = {query_id for query_id, hits in zip(queries, exact.ids, strict=True) if hits}  # a query may share no word
    assert {line.split()[0] for line in lines} == found and len(found) > 250
    assert all(line.split()[2] in ids for line in lines)
    refused = embedkit_here(*args, "--nprobe", "4", "-o", str(tmp_path / "other.trec"))
    assert refused.returncode == 2 and "--nprobe" in refused.stderr


def test_serve_answers_search_and_sparse_embeddings_from_a_sparse_index(splade_folder, scifact_subset, tmp_path):
    """`embedkit serve` on an exact sparse index: /search equals the library's sparse search, /v1/embeddings gives
    each text's non-zero dimensions and weights as the library encodes them."""
    import httpx
    from test_serve import running_server

    from embedkit import load_dataset
    from embedkit.encode import encode_to_folder
    from embedkit.index.sparse_exact import SparseExactIndex
    from embedkit.search.sparse import sparse_search

    model = load_model(splade_folder, max_length=32, max_active_dims=32)
    data = load_dataset(scifact_subset)
    index = SparseExactIndex.build(encode_to_folder(model, data.corpus, tmp_path / "emb", shard_size=64))
    folder = index.save(tmp_path / "idx")
    queries = list(data.split_queries("test").values())[:4]
    expected, _ = sparse_search(model, index, dict(enumerate(queries)), 5)
    with running_server(folder, tmp_path, "--dataset", str(scifact_subset), "--device", "cpu") as served:
        found = httpx.post(served.url + "/search", json={"queries": queries, "k": 5}, timeout=60).json()
        embedded = httpx.post(served.url + "/v1/embeddings", json={"input": queries[:2]}, timeout=60).json()
        base64 = httpx.post(served.url + "/v1/embeddings", json={"input": "x", "encoding_format": "base64"}, timeout=60)
        health = httpx.get(served.url + "/health", timeout=10).json()
    for i, result in enumerate(found["results"]):
        assert [(hit["id"], round(hit["score"], 4)) for hit in result["hits"]] == [
            (doc, round(score, 4)) for doc, score in expected[i].items()
        ]
        assert result["hits"][0]["snippet"]
    vectors = model.encode_queries(queries[:2])
    for i, row in enumerate(embedded["data"]):
        indices, values = vectors.row(i)
        assert row["embedding"]["indices"] == indices.tolist()
        assert np.allclose(row["embedding"]["values"], values, rtol=0, atol=1e-6)
    assert base64.status_code == 422 and health["index"]["engine"] == "exact"


def test_the_encode_command_writes_sparse_shards(splade_folder, scifact_subset, tmp_path):
    from conftest import embedkit_here

    from embedkit.encode import EmbeddingsFolder

    args = ["encode", "-m", str(splade_folder), "-d", str(scifact_subset), "--max-length", "16"]
    done = embedkit_here(*args, "-o", str(tmp_path / "emb"))
    assert done.returncode == 0, done.stderr
    folder = EmbeddingsFolder.open(tmp_path / "emb")
    assert folder.sparse and folder.manifest["count"] == 150 and folder.manifest["shards"][0]["nnz"]["rows"] == 150
    refused = embedkit_here(*args, "--pooling", "mean", "-o", str(tmp_path / "other"))
    assert refused.returncode == 2 and "is a sparse model" in refused.stderr


def test_the_impact_index_breaks_ties_past_its_read_depth_as_trec_eval_does(tmp_path):
    """Forty documents tie at every place: Lucene returns its own 15 of them, embedkit reads deeper and keeps the
    doc ids trec_eval ranks first (descending), as the exact index does."""
    from embedkit.data.trec import top_hits
    from embedkit.integrations.pyserini_impact import LuceneImpact, build_impact_index

    ids = [f"d{i:02d}" for i in range(40)]
    rows = SparseRows(np.arange(41) * 2, np.tile([3, 7], 40), np.ones(80, np.float32), dim=10)
    names = lambda indices: [f"t{i}" for i in indices]  # noqa: E731
    build_impact_index(tmp_path / "idx", ids, rows, names, {"model": "m"})
    query = SparseRows(np.array([0, 1]), np.array([3]), np.array([0.5], np.float32), dim=10)
    run = LuceneImpact(tmp_path / "idx").search(query, 5).to_run(["q"])
    assert list(run["q"].items()) == top_hits(np.full(40, 5000, np.float32), ids, 5)
    assert list(run["q"]) == ["d39", "d38", "d37", "d36", "d35"]
