"""Hard-negative mining on real SciFact train queries with the default model."""

from __future__ import annotations

import json

import pytest
from conftest import TEST_CACHE

from embedkit import EmbedkitError
from embedkit.train.mining import MiningSettings, mine_hard_negatives, write_mined


@pytest.fixture(scope="module")
def mined(default_model, scifact, scifact_embeddings):
    settings = MiningSettings(
        split="train", range_min=10, range_max=60, num_negatives=5, margin=0.02, relative_margin=0.05
    )
    return settings, mine_hard_negatives(default_model, scifact, settings, cache_dir=TEST_CACHE)


def test_negatives_respect_qrels_window_and_margin(mined, scifact):
    """Acceptance: never a qrels positive; ranks within the window; scores under the margin."""
    settings, records = mined
    qrels = scifact.qrels("train")
    assert len(records) == sum(1 for judged in qrels.values() for grade in judged.values() if grade > 0)
    for record in records:
        positives = {doc for doc, grade in qrels[record["query_id"]].items() if grade > 0}
        assert record["positive_id"] in positives
        assert not positives & set(record["negative_ids"])
        assert all(settings.range_min <= rank <= settings.range_max for rank in record["negative_ranks"])
        ceiling = min(
            record["positive_score"] - settings.margin, record["positive_score"] * (1 - settings.relative_margin)
        )
        assert all(score < ceiling for score in record["negative_scores"])
        assert record["negative_ranks"] == sorted(record["negative_ranks"])
    counts = [len(r["negatives"]) for r in records]
    # Where the positive itself ranks low, the margin guard leaves fewer (even zero) candidates: counted, not hidden.
    assert max(counts) == settings.num_negatives and sum(c == 5 for c in counts) / len(counts) > 0.8


def test_margin_guard_removes_candidates(default_model, scifact, mined):
    """A strict margin must drop candidates that a zero margin keeps (the guard does something)."""
    _, _guarded = mined
    loose = mine_hard_negatives(
        default_model,
        scifact,
        MiningSettings(range_min=1, range_max=20, num_negatives=20, relative_margin=0.0, sampling="top"),
        cache_dir=TEST_CACHE,
    )
    strict = mine_hard_negatives(
        default_model,
        scifact,
        MiningSettings(range_min=1, range_max=20, num_negatives=20, relative_margin=0.2, sampling="top"),
        cache_dir=TEST_CACHE,
    )
    assert sum(len(r["negatives"]) for r in strict) < sum(len(r["negatives"]) for r in loose)
    assert any(min(r["negative_ranks"], default=99) < 10 for r in loose)


def test_written_file_is_training_data_with_settings(mined, default_model, scifact, tmp_path):
    from embedkit.train.data import load_jsonl_examples

    settings, records = mined
    path = write_mined(tmp_path / "mined.jsonl", records[:50], default_model, scifact, settings)
    meta = json.loads((tmp_path / "mined.jsonl.meta.json").read_text())
    assert meta["mining"]["range_min"] == 10 and meta["model"]["model"] == default_model.settings["model"]
    short = sum(len(r["negatives"]) < 3 for r in records[:50])
    assert short > 0
    with pytest.raises(EmbedkitError, match="negatives, 3 needed"):
        load_jsonl_examples(path, num_negatives=3)
    examples = load_jsonl_examples(path, num_negatives=3, drop_short=True)
    # query_id rides along to carve a dev set by query; the trainer drops it before training
    assert examples.column_names == ["anchor", "positive", "negative_1", "negative_2", "negative_3", "query_id"]
    assert len(examples) == 50 - short
    assert json.loads(examples.info.description)["dropped_short_rows"] == short


def test_empty_window_is_refused(default_model, scifact):
    with pytest.raises(EmbedkitError, match="rank window 50-10 is empty"):
        mine_hard_negatives(default_model, scifact, MiningSettings(range_min=50, range_max=10))


def test_hybrid_candidates_mix_bm25_into_the_window(default_model, scifact, scifact_embeddings):
    """``candidates="hybrid"``: ranks are the RRF of the dense and the BM25 top ``range_max``; a candidate only BM25
    found is scored by the model (its cosine, as the guard needs), and the guard and qrels still hold."""
    import numpy as np

    from embedkit.search import Dense, DenseRetrieval
    from embedkit.search.bm25 import bm25_searcher

    settings = MiningSettings(range_min=1, range_max=30, num_negatives=30, relative_margin=0.0, sampling="top")
    records = mine_hard_negatives(
        default_model, scifact, MiningSettings(**{**settings.__dict__, "candidates": "hybrid"}), cache_dir=TEST_CACHE
    )
    # every train query, in mining's order, so that the query vectors are bit-identical (same batches)
    queries = {q: scifact.queries[q] for q in scifact.qrels("train")}
    dense = DenseRetrieval(default_model, Dense(), TEST_CACHE).search(scifact, queries, 30)
    lexical = bm25_searcher(scifact).search(queries, 30)
    query_ids = sorted(queries)[:40]
    bm25_only = []
    for record in (r for r in records if r["query_id"] in query_ids):
        query_id = record["query_id"]
        fused: dict[str, float] = {}
        for run in (dense[query_id], lexical[query_id]):
            for rank, doc_id in enumerate(sorted(run, key=lambda d: (run[d], d), reverse=True), start=1):
                fused[doc_id] = fused.get(doc_id, 0.0) + 1 / (60 + rank)
        # the tie rule of trec_eval, as fusion applies it: score descending, then document id descending
        rank_of = {d: i for i, d in enumerate(sorted(fused, key=lambda d: (fused[d], d), reverse=True)[:30], start=1)}
        assert record["negative_ranks"] == [rank_of[d] for d in record["negative_ids"]]
        positives = {d for d, grade in scifact.qrels("train")[query_id].items() if grade > 0}
        assert not set(record["negative_ids"]) & positives
        assert all(score < record["positive_score"] for score in record["negative_scores"])
        bm25_only += [
            (record["query"], text, score)
            for d, text, score in zip(record["negative_ids"], record["negatives"], record["negative_scores"])
            if d not in dense[query_id]
        ]
    assert len(bm25_only) >= 10, "hybrid mining should bring in candidates the dense top 30 lacks"
    query_vectors = default_model.encode_queries([query for query, _, _ in bm25_only[:10]])
    document_vectors = default_model.encode_corpus([{"title": "", "text": text} for _, text, _ in bm25_only[:10]])
    cosines = np.einsum("ij,ij->i", query_vectors, document_vectors)
    assert np.allclose(cosines, [score for _, _, score in bm25_only[:10]], atol=2e-3)


def test_unknown_candidates_are_refused(default_model, scifact):
    with pytest.raises(EmbedkitError, match="unknown candidates 'bm25'"):
        mine_hard_negatives(default_model, scifact, MiningSettings(candidates="bm25"), cache_dir=TEST_CACHE)
