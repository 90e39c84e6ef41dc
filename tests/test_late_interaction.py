"""Late-interaction retrieval end to end on a SciFact cut: ``evaluate --retriever colbert`` over the exact index ranks
as sentence-transformers' own ``maxsim`` does, and ``encode`` -> ``index`` -> ``search`` through the CLI gives the
same run as ``evaluate``."""

from __future__ import annotations

import numpy as np
from conftest import embedkit_here

from embedkit import evaluate, load_dataset, load_model
from embedkit.data.trec import read_run


def test_evaluate_colbert_ranks_as_the_librarys_maxsim(colbert_folder, scifact_subset, tmp_path):
    """Every query's top 10 from ``evaluate`` equals the order of sentence-transformers' ``maxsim`` over the same
    documents and queries, encoded by ``MultiVectorEncoder`` itself (float32 token vectors)."""
    from sentence_transformers.multi_vector_encoder import MultiVectorEncoder, maxsim

    from embedkit.data.beir import doc_text

    model = load_model(colbert_folder, token_dtype="float32")
    report = evaluate(model, scifact_subset, "test", "colbert", output=tmp_path / "out", k=10, cache_dir=tmp_path)
    run = read_run(f"{report['folder']}/run.trec")
    data = load_dataset(scifact_subset)
    queries = data.split_queries("test")
    reference = MultiVectorEncoder(str(colbert_folder))
    documents = reference.encode_document([doc_text(row) for row in data.corpus], convert_to_numpy=True)
    scores = maxsim(reference.encode_query(list(queries.values()), convert_to_numpy=True), documents).numpy()
    doc_ids = list(data.corpus["_id"])
    for row, query_id in enumerate(queries):
        order = sorted(range(len(doc_ids)), key=lambda j: (scores[row, j], doc_ids[j]), reverse=True)[:10]
        ours = sorted(run[query_id].items(), key=lambda hit: (hit[1], hit[0]), reverse=True)
        assert [doc for doc, _ in ours] == [doc_ids[j] for j in order], query_id
        assert np.allclose([score for _, score in ours], scores[row, order], rtol=1e-5, atol=1e-5)
    late = report["retrieval"]["late_interaction"]
    assert late["query_tokens"]["mean"] == 32 and late["document_tokens"]["bytes_per_row"] > 0
    assert report["model"]["kind"] == "multivector" and report["retriever"]["type"] == "colbert"


def test_the_cli_encodes_indexes_and_searches_as_evaluate_does(colbert_folder, scifact_subset, tmp_path):
    """float16 token vectors (the default) through ``encode``, ``index`` and ``search`` give ``evaluate``'s run."""
    model = ["-m", str(colbert_folder)]
    done = embedkit_here("encode", *model, "-d", str(scifact_subset), "-o", str(tmp_path / "emb"))
    assert done.returncode == 0, done.stderr
    done = embedkit_here("index", "-e", str(tmp_path / "emb"), "-o", str(tmp_path / "idx"))
    assert done.returncode == 0 and "exact MaxSim" in done.stdout, done.stderr
    searched = ["search", "-i", str(tmp_path / "idx"), "-d", str(scifact_subset), "--split", "test", "-k", "10"]
    done = embedkit_here(*searched, "-o", str(tmp_path / "run.trec"))
    assert done.returncode == 0, done.stderr
    done = embedkit_here("evaluate", *model, "-d", str(scifact_subset), "--retriever", "colbert", "-k", "10",
                         "-o", str(tmp_path / "reports"), "--cache-dir", str(tmp_path / "cache"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    (folder,) = (tmp_path / "reports").iterdir()
    assert "colbert-exact" in folder.name
    assert read_run(tmp_path / "run.trec") == read_run(folder / "run.trec")


def test_serve_answers_search_and_token_vectors_from_a_multivector_index(colbert_folder, scifact_subset, tmp_path):
    """`embedkit serve` on an exact multi-vector index: /search equals the library's ``late_search``, and
    /v1/embeddings gives each text's token vectors as the library encodes them."""
    import httpx
    from test_serve import running_server

    from embedkit.encode import encode_to_folder
    from embedkit.index.multivector_exact import MultiVectorExactIndex
    from embedkit.search.late_interaction import late_search

    model = load_model(colbert_folder)
    data = load_dataset(scifact_subset)
    index = MultiVectorExactIndex.build(encode_to_folder(model, data.corpus, tmp_path / "emb", shard_size=64))
    folder = index.save(tmp_path / "idx")
    queries = list(data.split_queries("test").values())[:4]
    expected, _ = late_search(model, index, dict(enumerate(queries)), 5)
    with running_server(folder, tmp_path, "--dataset", str(scifact_subset), "--device", "cpu") as served:
        found = httpx.post(served.url + "/search", json={"queries": queries, "k": 5}, timeout=60).json()
        embedded = httpx.post(served.url + "/v1/embeddings", json={"input": queries[:2]}, timeout=60).json()
        health = httpx.get(served.url + "/health", timeout=10).json()
    for i, result in enumerate(found["results"]):
        assert [(hit["id"], round(hit["score"], 4)) for hit in result["hits"]] == [
            (doc, round(score, 4)) for doc, score in expected[i].items()
        ]
        assert result["hits"][0]["snippet"]
    vectors = model.encode_queries(queries[:2])
    for i, row in enumerate(embedded["data"]):
        assert np.allclose(row["embedding"], vectors.row(i).astype(np.float32), rtol=0, atol=1e-6)
    assert health["index"]["engine"] == "exact" and health["model"]["kind"] == "multivector"


def test_the_ivf_index_finds_the_exact_top_10(colbert_folder, scifact_subset, tmp_path):
    """Visiting every list with every token a candidate, the IVF route is exhaustive MaxSim (ids and scores); at its
    default settings it still finds most of the exact top 10; saved and reopened, it searches the same."""
    from embedkit.encode import encode_to_folder
    from embedkit.index import open_index
    from embedkit.index.multivector_exact import MultiVectorExactIndex
    from embedkit.index.multivector_ivf import MultiVectorIVFIndex

    model = load_model(colbert_folder)
    data = load_dataset(scifact_subset)
    embeddings = encode_to_folder(model, data.corpus, tmp_path / "emb", shard_size=64)
    exact, ivf = MultiVectorExactIndex.build(embeddings), MultiVectorIVFIndex.build(embeddings, lists=16)
    queries = model.encode_queries(list(data.split_queries("test").values()))
    reference = exact.search(queries, 10)
    found = ivf.search(queries, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found.ids, reference.ids)])
    assert recall >= 0.9, recall
    ivf.set_search_params(nprobe=16, candidates=len(exact.documents.vectors))
    reopened = open_index(ivf.save(tmp_path / "idx"))
    assert isinstance(reopened, MultiVectorIVFIndex) and reopened.search_params == ivf.search_params
    for searched in (ivf.search(queries, 10), reopened.search(queries, 10)):
        assert searched.ids == reference.ids
        assert np.allclose(searched.scores, reference.scores, rtol=1e-6, atol=1e-6)


def test_the_plaid_index_compresses_tokens_and_prunes_without_losing_its_top_10(colbert_folder, scifact_subset,
                                                                                 tmp_path):  # fmt: skip
    """At its defaults the compressed index stores under a fifth of the float16 bytes per token, and its pruning
    (a few centroids per query token, a quarter of the candidates decompressed) keeps the top 10 it finds probing
    every centroid and decompressing every document, which is exact MaxSim over the tokens it stores; at 8 bits
    those are close enough to find the exact top 10. ``index --late-index plaid`` then ``search``, and ``evaluate``
    with the plaid spec, give the library's run. (This model's projection is untrained, so its scores are close
    together: the 2-bit recall against exact of a trained ColBERT is measured in benchmarks/plaid_scifact.py.)"""
    from embedkit import LateInteraction
    from embedkit.encode import encode_to_folder
    from embedkit.index.multivector_exact import MultiVectorExactIndex
    from embedkit.index.multivector_plaid import MultiVectorPlaidIndex
    from embedkit.multivector import TokenRows

    model = load_model(colbert_folder)
    data = load_dataset(scifact_subset)
    embeddings = encode_to_folder(model, data.corpus, tmp_path / "emb", shard_size=64)
    exact, plaid = MultiVectorExactIndex.build(embeddings), MultiVectorPlaidIndex.build(embeddings)
    assert plaid.bytes_per_token <= exact.documents.dim * 2 / 5
    queries = model.encode_queries(list(data.split_queries("test").values()))

    def recall(found, reference) -> float:
        return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found.ids, reference.ids)]))

    stored = MultiVectorExactIndex(TokenRows(plaid.offsets, plaid.codec.decode(plaid.codes, plaid.residuals)),
                                   plaid.doc_ids, plaid.settings)  # fmt: skip
    whole = plaid.search(queries, 10, nprobe=len(plaid.codec.centroids), candidates=4 * len(plaid))
    assert whole.ids == stored.search(queries, 10).ids
    assert recall(plaid.search(queries, 10), whole) >= 0.9
    fine = MultiVectorPlaidIndex.build(embeddings, bits=8)
    everything = {"nprobe": len(fine.codec.centroids), "candidates": 4 * len(fine)}
    assert recall(fine.search(queries, 10, **everything), exact.search(queries, 10)) >= 0.95
    done = embedkit_here("index", "-e", str(tmp_path / "emb"), "-o", str(tmp_path / "idx"), "--late-index", "plaid")
    assert done.returncode == 0 and "compressed tokens" in done.stdout, done.stderr
    searched = ["search", "-i", str(tmp_path / "idx"), "-d", str(scifact_subset), "--split", "test", "-k", "10"]
    done = embedkit_here(*searched, "-o", str(tmp_path / "run.trec"))
    assert done.returncode == 0, done.stderr
    expected = {q: list(hits) for q, hits in plaid.search(queries, 10).to_run(data.split_queries("test")).items()}
    assert {q: list(hits) for q, hits in read_run(tmp_path / "run.trec").items()} == expected
    report = evaluate(model, data, "test", LateInteraction(index="plaid"), output=tmp_path / "r", k=10,
                      cache_dir=tmp_path / "cache")  # fmt: skip
    assert "colbert-plaid" in report["folder"]
    assert {q: list(hits) for q, hits in read_run(f"{report['folder']}/run.trec").items()} == expected


def test_a_multivector_model_reranks_a_first_stage_from_its_stored_token_vectors(
    colbert_folder, scifact_subset, tmp_path
):
    """``evaluate --reranker COLBERT`` over BM25 re-scores each query's top 20 by MaxSim from the cached token
    vectors (no document encoded again): the head's scores are the exact ColBERT run's for those documents, and
    ``embedkit rerank`` (which encodes the head's documents, having no cache) orders them the same."""
    from embedkit import BM25, EvaluateOptions
    from embedkit.data.trec import ranked
    from embedkit.reranking.late_reranker import LateInteractionReranker
    from embedkit.reranking.settings import RerankSettings

    cache, data = tmp_path / "cache", load_dataset(scifact_subset)
    colbert = evaluate(load_model(colbert_folder), data, "test", "colbert", output=tmp_path / "c", cache_dir=cache)
    settings = RerankSettings(str(colbert_folder), depth=20)
    first = evaluate(None, data, "test", BM25(), output=tmp_path / "bm25", cache_dir=cache)
    options = EvaluateOptions(reranker=settings)
    reranked = evaluate(None, data, "test", BM25(), output=tmp_path / "out", cache_dir=cache, options=options)
    assert reranked["reranker"]["scores"] == "maxsim" and reranked["reranker"]["pairs_scored"] == 20 * 20
    full, run = read_run(f"{colbert['folder']}/run.trec"), read_run(f"{reranked['folder']}/run.trec")
    bm25 = read_run(f"{first['folder']}/run.trec")
    for query_id, hits in bm25.items():
        head = [doc for doc, _ in ranked(hits)[:20]]
        ours = ranked(run[query_id])[:20]
        assert {doc for doc, _ in ours} == set(head)
        assert all(abs(score - full[query_id][doc]) < 1e-4 for doc, score in ours)
    scorer = LateInteractionReranker(settings, cache)
    scorer.rerank_run(bm25, data)
    assert scorer.documents_encoded == 0  # the stored token vectors, not a new encode
    done = embedkit_here("rerank", "-r", f"{first['folder']}/run.trec", "-d", str(scifact_subset), "-m",
                         str(colbert_folder), "--depth", "20", "-o", str(tmp_path / "cli.trec"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    cli = read_run(tmp_path / "cli.trec")
    for query_id in bm25:
        assert [doc for doc, _ in ranked(cli[query_id])[:20]] == [doc for doc, _ in ranked(run[query_id])[:20]]


def test_a_living_plaid_index_codes_new_tokens_against_its_centroids(colbert_folder, scifact_subset, tmp_path):
    """Opened for updates with its embeddings folder (it keeps only codes), the compressed index takes adds, deletes
    and upserts with metadata: an added document is found by its own tokens, a deleted one never, a filter selects
    by metadata; a compaction codes the live rows against the same centroids: the reopened folder searches as the
    index of those rows coded by the old codec does."""
    from embedkit.encode import encode_to_folder
    from embedkit.index import open_index
    from embedkit.index.multivector_plaid import MultiVectorPlaidIndex
    from embedkit.index.registry import open_live

    model, data = load_model(colbert_folder), load_dataset(scifact_subset)
    embeddings = encode_to_folder(model, data.corpus, tmp_path / "emb", shard_size=64)
    base = MultiVectorPlaidIndex.build(embeddings)
    folder = base.save(tmp_path / "idx")
    live = open_live(folder, fields={"year": "int"}, vectors=embeddings)
    texts = ["Vitamin D deficiency and bone fractures in older adults.", "Gut microbiota shapes the immune response."]
    live.add(["new-a", "new-b"], model.encode_documents(texts), metadata=[{"year": 2020}, {"year": 2021}])
    gone = base.doc_ids[:3]
    live.delete(gone)
    live.upsert([base.doc_ids[5]], model.encode_documents(["Statins lower cholesterol."]), metadata=[{"year": 2019}])
    queries = model.encode_queries(texts)
    hits = live.search(queries, 5)
    assert [row[0] for row in hits.ids] == ["new-a", "new-b"] and not set(gone) & {d for row in hits.ids for d in row}
    assert {d for row in live.search(queries, 5, filter="year >= 2021").ids for d in row} == {"new-b"}
    ids, rows = live.live_rows()
    live.compact()
    reopened = open_index(folder)
    compacted = reopened.base
    assert isinstance(compacted, MultiVectorPlaidIndex) and compacted.doc_ids == ids and len(ids) == len(base) - 1
    assert np.array_equal(compacted.codec.centroids, base.codec.centroids)
    expected = MultiVectorPlaidIndex.from_rows(rows, ids, base.settings, like=base).search(queries, 5)
    found = reopened.search(queries, 5)
    assert found.ids == expected.ids and not set(gone) & {d for row in found.ids for d in row}
