"""Whole-dataset checks (``make test-slow``): minutes of encoding each on a 2-core CPU."""

from __future__ import annotations

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from embedkit.data import doc_text
from embedkit.models.reference import default_model_path

pytestmark = pytest.mark.slow


def test_whole_scifact_corpus_matches_sentence_transformers(scifact_embeddings, scifact):
    """Every one of the 5,183 cached SciFact vectors equals sentence-transformers' encode (cosine >= 0.9999)."""
    reference = SentenceTransformer(str(default_model_path()), device="cpu")
    theirs = reference.encode([doc_text(doc) for doc in scifact.corpus], batch_size=32)
    ours = scifact_embeddings.embeddings()
    assert scifact_embeddings.ids() == scifact.corpus["_id"]
    assert float(np.min((ours * theirs).sum(axis=1))) >= 0.9999


def test_hnsw_evaluation_is_close_to_exact(default_model, scifact, scifact_report, tmp_path):
    from conftest import TEST_CACHE

    from embedkit import Dense, evaluate

    hnsw = evaluate(default_model, scifact, "test", Dense("HNSW32", ef_search=256), cache_dir=TEST_CACHE)
    assert hnsw["embeddings_cache"]["encoded_shards"] == 0
    assert hnsw["metrics"]["ndcg_at_10"] == pytest.approx(scifact_report["metrics"]["ndcg_at_10"], abs=0.005)
