"""The torch exact search (``embedkit.index.torch_search``) on the CPU device against FAISS ``Flat``, on the real
SciFact corpus vectors and test queries: same ids (swaps only inside score ties), same scores."""

from __future__ import annotations

import numpy as np
import pytest

from embedkit import EmbedkitError, Index
from embedkit.index.torch_search import ExactSearch, cuda_available


@pytest.fixture(scope="module")
def corpus(scifact_embeddings):
    return scifact_embeddings.embeddings(), scifact_embeddings.ids()


@pytest.fixture(scope="module")
def queries(default_model, scifact):
    return default_model.encode_queries(list(scifact.split_queries("test").values()))


def _assert_same_top_k(expected: tuple, found: tuple, tie: float = 1e-6) -> None:
    """Scores within 1e-5 position by position; ids equal except where FAISS's own scores tie within ``tie``."""
    (want_scores, want_rows), (got_scores, got_rows) = expected, found
    assert got_rows.shape == want_rows.shape
    np.testing.assert_allclose(got_scores, want_scores, atol=1e-5, rtol=0)
    for scores, want, got in zip(want_scores, want_rows, got_rows):
        for j in np.flatnonzero(want != got):
            neighbours = scores[max(0, j - 1) : j + 2]
            assert np.sum(np.abs(neighbours - scores[j]) <= tie) >= 2, f"row {want[j]} vs {got[j]} without a tie"
        for row in set(want) - set(got):  # cut off at k: only by a tie with the k-th score
            assert abs(scores[list(want).index(row)] - scores[-1]) <= tie


@pytest.mark.parametrize(("metric", "max_memory"), [("ip", 1 << 20), ("l2", 1 << 20), ("ip", 1 << 30)])
def test_torch_on_cpu_matches_faiss_flat(corpus, queries, metric, max_memory):
    """Acceptance: 1,000-row database blocks (6 of them) and, at 1 MiB, streamed blocks and several query blocks."""
    embeddings, ids = corpus
    faiss_flat = Index.build(embeddings, ids, "Flat", metric)
    torch_flat = Index.build(embeddings, ids, "Flat", metric)
    torch_flat.set_exact_search(ExactSearch("torch", "cpu", max_memory=max_memory, block_rows=1000))
    k = 20
    _assert_same_top_k(faiss_flat.search_rows(queries, k), torch_flat.search_rows(queries, k))
    used = torch_flat.meta["exact_search"]["used"]
    assert used == {"backend": "torch", "device": "cpu", "dtype": "float32", "block_rows": 1000, "database_blocks": 6}
    # corpus vectors as queries: each finds itself first (score 1 for ip, 0 for l2 on these unit vectors)
    scores, rows = torch_flat.search_rows(embeddings[:50], 1)
    assert rows[:, 0].tolist() == list(range(50))
    np.testing.assert_allclose(scores[:, 0], 1.0 if metric == "ip" else 0.0, atol=1e-5)


def test_bfloat16_is_recorded_and_kept(corpus, queries, tmp_path):
    embeddings, ids = corpus
    exact = Index.build(embeddings, ids, "Flat").search_rows(queries, 10)
    index = Index.build(embeddings, ids, "Flat")
    index.set_exact_search(ExactSearch("torch", "cpu", "bfloat16", block_rows=2048))
    scores, rows = index.search_rows(queries, 10)
    assert index.meta["exact_search"]["dtype"] == "bfloat16"
    assert index.meta["exact_search"]["used"]["dtype"] == "bfloat16"
    assert index.meta["exact_search"]["used"]["database_blocks"] == 3
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(exact[1], rows)])
    print(f"bfloat16 top-10 overlap with float32 FAISS: {overlap:.4f}, max error {np.abs(scores - exact[0]).max()}")
    assert overlap >= 0.9 and np.abs(scores - exact[0]).max() < 0.02  # 8 mantissa bits: close, not equal
    assert not np.array_equal(scores, exact[0])  # the products really were computed in bfloat16
    reloaded = Index.load(index.save(tmp_path / "bf16"))
    assert reloaded.exact == ExactSearch("torch", "cpu", "bfloat16", block_rows=2048)
    assert np.array_equal(reloaded.search_rows(queries, 10)[1], rows)


def test_auto_uses_faiss_without_a_cuda_gpu(corpus, queries):
    """The default: FAISS on a CPU-only machine; torch on a CUDA GPU that faiss-cpu cannot use."""
    embeddings, ids = corpus
    index = Index.build(embeddings[:500], ids[:500], "Flat")
    index.search_rows(queries[:5], 10)
    if cuda_available():
        assert index.meta["exact_search"]["used"]["device"].startswith("cuda")
    else:
        assert "exact_search" not in index.meta


def test_bad_settings_are_user_errors(corpus):
    embeddings, ids = corpus
    with pytest.raises(EmbedkitError, match="field 'dtype': unknown value 'int8'"):
        ExactSearch("torch", "cpu", "int8").check()
    with pytest.raises(EmbedkitError, match="field 'backend'"):
        ExactSearch("cuda").check()
    hnsw = Index.build(embeddings[:300], ids[:300], "HNSW8")
    hnsw.set_exact_search(ExactSearch("torch", "cpu"))
    with pytest.raises(EmbedkitError, match="only a CPU 'Flat' index, not 'HNSW8'"):
        hnsw.search_rows(embeddings[:2], 5)
