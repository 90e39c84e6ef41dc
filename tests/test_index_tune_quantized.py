"""Tuning nprobe/efSearch against exact search, and SQ8 / binary indexes with exact re-scoring, on real SciFact."""

from __future__ import annotations

import json
import subprocess

import faiss
import numpy as np
import pytest
from conftest import run_cli

from embedkit import EmbedkitError, Index
from embedkit.data.trec import read_run
from embedkit.evaluation.metrics import compute_metrics
from embedkit.index.tune import tune
from embedkit.index.vectors import Vectors

FLAT_NDCG_AT_10 = 0.6451  # the default model on SciFact test, exact search (tests/test_metrics.py pins it too)


def embedkit(*args: object) -> subprocess.CompletedProcess:
    return run_cli(args)


@pytest.fixture(scope="module")
def vectors(scifact_embeddings):
    return scifact_embeddings.embeddings(), scifact_embeddings.ids()


@pytest.fixture(scope="module")
def test_queries(default_model, scifact):
    queries = scifact.split_queries("test")
    return queries, default_model.encode_queries(list(queries.values()))


@pytest.fixture(scope="module")
def flat(vectors):
    return Index.build(*vectors, "Flat")


def _recall_at_10(exact_hits: list[list[str]], approx_hits: list[list[str]]) -> float:
    return float(np.mean([len(set(a) & set(b)) / len(a) for a, b in zip(exact_hits, approx_hits)]))


def _ndcg_at_10(index: Index, test_queries, qrels, **search) -> float:
    """nDCG@10 of the top 10 hits per query (so ``rescore=N`` re-ranks only 10*N candidates)."""
    queries, query_vectors = test_queries
    scores, hits = index.search(query_vectors, 10, **search)
    run = {q: {d: float(s) for d, s in zip(row, row_scores)} for q, row, row_scores in zip(queries, hits, scores)}
    return compute_metrics(qrels, run)[0]["ndcg_at_10"]


def test_cli_tune_ivf_on_real_queries(scifact_embeddings, scifact_path, test_queries, flat, tmp_path):
    """--tune on SciFact's real test queries picks the fastest nprobe with recall@10 >= 0.95; reload applies it."""
    result = embedkit(
        "index", "-e", scifact_embeddings.path, "-o", tmp_path / "ivf", "--factory", "IVF128,Flat", "--tune",
        "--tune-dataset", scifact_path, "--tune-split", "test",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    print(result.stdout)
    assert "recall@10" in result.stdout and "<- chosen" in result.stdout
    meta = json.loads((tmp_path / "ivf" / "meta.json").read_text())
    tuning = meta["tuning"]
    assert tuning["param"] == "nprobe" and tuning["target_recall"] == 0.95 and tuning["queries"]["count"] == 300
    assert meta["search_params"] == {"nprobe": tuning["value"]}
    assert meta["vectors"]["path"] == str(scifact_embeddings.path.resolve())
    values = [point["value"] for point in tuning["curve"]]
    assert values == sorted(values) and values[0] == 1 and tuning["value"] in values
    passing = [p for p in tuning["curve"] if p["recall_at_k"] >= 0.95]
    assert tuning["qps"] == max(p["qps"] for p in passing) and tuning["recall_at_k"] >= 0.95
    loaded = Index.load(tmp_path / "ivf")
    assert faiss.extract_index_ivf(loaded.faiss_index).nprobe == tuning["value"]
    _, query_vectors = test_queries
    recall = _recall_at_10(flat.search(query_vectors, 10)[1], loaded.search(query_vectors, 10)[1])
    print(f"IVF128,Flat nprobe={tuning['value']}: recall@10 vs Flat on SciFact test = {recall:.4f}")
    assert recall >= 0.95 and recall == pytest.approx(tuning["recall_at_k"], abs=0.005)


def test_tune_hnsw_ef_search_on_a_corpus_sample(vectors, scifact_embeddings, flat, tmp_path):
    """The default queries are 1,000 corpus vectors; the choice reaches the target on them and survives a reload."""
    index = Index.build(*vectors, "HNSW32")
    index.attach_vectors(scifact_embeddings)
    chosen = tune(index, target_recall=0.99)
    print("\n".join(chosen.table()))
    assert chosen.param == "efSearch" and index.search_params == {"efSearch": chosen.value}
    assert faiss.downcast_index(index.faiss_index).hnsw.efSearch == chosen.value
    sample = Vectors.open(scifact_embeddings).sample(1000, seed=0)
    recall = _recall_at_10(flat.search(sample, 10)[1], index.search(sample, 10)[1])
    assert recall >= 0.99 and recall == pytest.approx(chosen.recall_at_k, abs=0.005)
    reloaded = Index.load(index.save(tmp_path / "hnsw"))
    assert reloaded.meta["tuning"]["value"] == chosen.value and reloaded.search_params == index.search_params


def test_tune_errors_name_the_best_recall(vectors, scifact_embeddings):
    index = Index.build(*vectors, "IVF64,Flat")
    index.attach_vectors(scifact_embeddings)
    with pytest.raises(EmbedkitError, match=r"no nprobe reaches recall@10 0.99: the best is 0\.\d+ at nprobe=2"):
        tune(index, values=[1, 2], target_recall=0.99)
    assert index.search_params == {} and faiss.extract_index_ivf(index.faiss_index).nprobe == 1
    with pytest.raises(EmbedkitError, match="'BFlat' has nothing to tune"):
        tune(Index.build(*vectors, "BFlat"))


def test_sq8_recall_and_exact_rescoring(vectors, scifact_embeddings, test_queries, flat):
    """int8 scalar quantisation loses little; re-scored hits carry the exact float inner products."""
    embeddings, ids = vectors
    _, query_vectors = test_queries
    exact = flat.search(query_vectors, 10)[1]
    index = Index.build(embeddings, ids, "SQ8")
    recall = _recall_at_10(exact, index.search(query_vectors, 10)[1])
    index.attach_vectors(scifact_embeddings)
    scores, hits = index.search(query_vectors, 10, rescore=10)
    rescored = _recall_at_10(exact, hits)
    print(f"SQ8 recall@10 vs Flat: {recall:.4f}, rescored x10: {rescored:.4f}")
    assert recall >= 0.98 and rescored >= 0.99
    row_of = {doc: row for row, doc in enumerate(ids)}
    for query, row_scores, row_hits in zip(query_vectors, scores, hits):
        np.testing.assert_allclose(row_scores, embeddings[[row_of[d] for d in row_hits]] @ query, rtol=0, atol=1e-5)
        assert list(row_scores) == sorted(row_scores, reverse=True)


def test_binary_hamming_search_rescoring_and_round_trip(vectors, scifact_embeddings, test_queries, flat, tmp_path):
    """1 bit per dimension: poor recall alone, good with 10x candidates re-scored; identical after a reload."""
    embeddings, ids = vectors
    _, query_vectors = test_queries
    exact = flat.search(query_vectors, 10)[1]
    index = Index.build(embeddings, ids, "BFlat")
    assert index.binary and index.meta["binary"] and index.dim == 384
    scores, hits = index.search(query_vectors, 10)
    bits = np.unpackbits(np.packbits(embeddings > 0, axis=1), axis=1).astype(bool)
    hamming = (bits[[ids.index(d) for d in hits[0]]] != (query_vectors[0] > 0)).sum(1)
    np.testing.assert_array_equal(scores[0], 384 - 2 * hamming)
    alone = _recall_at_10(exact, hits)
    index.attach_vectors(scifact_embeddings)
    rescored = _recall_at_10(exact, index.search(query_vectors, 10, rescore=10)[1])
    print(f"BFlat recall@10 vs Flat: {alone:.4f}, rescored x10: {rescored:.4f}")
    assert 0.4 <= alone <= 0.75 and rescored >= 0.9
    reloaded = Index.load(index.save(tmp_path / "binary"))  # finds the float vectors through meta.json
    assert isinstance(reloaded.faiss_index, faiss.IndexBinary)
    for rescore in (0, 10):
        before = index.search(query_vectors, 10, rescore=rescore)
        after = reloaded.search(query_vectors, 10, rescore=rescore)
        assert before[1] == after[1] and np.array_equal(before[0], after[0])


def test_binary_needs_a_dimension_divisible_by_8(vectors):
    with pytest.raises(EmbedkitError, match="multiple of 8, the vectors have 380"):
        Index.build(vectors[0][:100, :380], vectors[1][:100], "BFlat")


def test_rescore_without_float_vectors_is_a_user_error(vectors, test_queries):
    index = Index.build(vectors[0], vectors[1], "SQ8")
    with pytest.raises(EmbedkitError, match="exact scoring needs the float vectors"):
        index.search(test_queries[1][:2], 10, rescore=4)


def test_ndcg_at_10_of_quantised_indexes(vectors, scifact_embeddings, test_queries, flat, scifact):
    """SciFact test nDCG@10 (top 10 hits): SQ8 ~ Flat; binary loses a lot alone and almost nothing re-scored."""
    qrels = scifact.qrels("test")
    results = {"Flat": _ndcg_at_10(flat, test_queries, qrels)}
    for factory in ("SQ8", "BFlat"):
        index = Index.build(*vectors, factory)
        index.attach_vectors(scifact_embeddings)
        results[factory] = _ndcg_at_10(index, test_queries, qrels)
        results[f"{factory}+rescore10"] = _ndcg_at_10(index, test_queries, qrels, rescore=10)
    print({name: round(value, 4) for name, value in results.items()})
    assert results["Flat"] == pytest.approx(FLAT_NDCG_AT_10, abs=1e-4)
    assert results["SQ8"] >= FLAT_NDCG_AT_10 - 0.005 and results["SQ8+rescore10"] >= FLAT_NDCG_AT_10 - 0.002
    assert results["BFlat"] < FLAT_NDCG_AT_10 - 0.03
    assert results["BFlat+rescore10"] >= FLAT_NDCG_AT_10 - 0.01


def test_cli_search_with_rescore_on_a_binary_index(vectors, scifact_embeddings, scifact_path, scifact, tmp_path):
    """`embedkit search --rescore 10` (through dense_search) on a saved BFlat index finds the float vectors through
    meta.json and scores like the library's binary + rescore above."""
    index = Index.build(*vectors, "BFlat", model_settings=scifact_embeddings.settings)
    index.attach_vectors(scifact_embeddings.path)
    index.save(tmp_path / "bin")
    assert json.loads((tmp_path / "bin" / "meta.json").read_text())["binary"] is True
    result = embedkit(
        "search", "-i", tmp_path / "bin", "-d", scifact_path, "--split", "test", "-k", "10", "--rescore", "10",
        "-o", tmp_path / "run.trec",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    ndcg = compute_metrics(scifact.qrels("test"), read_run(tmp_path / "run.trec"))[0]["ndcg_at_10"]
    print(f"CLI BFlat --rescore 10: nDCG@10 = {ndcg:.4f}")
    assert ndcg >= FLAT_NDCG_AT_10 - 0.01
