"""Late interaction (ColBERT) trained through the CLI on a small cut from the default model (its token projection
initialised, and said so); the output loads with ``load_model`` and with sentence-transformers' ``MultiVectorEncoder``,
and ``embedkit encode`` stores the library's own token vectors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import embedkit_here
from hypothesis import given, settings
from hypothesis import strategies as st

from embedkit import load_model
from embedkit.encode.folder import EmbeddingsFolder
from embedkit.multivector import maxsim

QUERIES = ["what causes fever?", "Aspirin lowers the risk of colorectal cancer.", "protein folding"]


@pytest.fixture(scope="module")
def trained_colbert(slice_mined, tmp_path_factory):
    output = tmp_path_factory.mktemp("colbert") / "model"
    args = ["--data", str(slice_mined), "--num-negatives", "1", "--drop-short-examples", "--max-steps", "3"]
    done = embedkit_here("train", "--objective", "colbert", *args, "--batch-size", "4", "--max-length", "48",
                         "--projection-dim", "64", "-o", str(output))  # fmt: skip
    assert done.returncode == 0, done.stderr
    return output


def test_a_colbert_model_trained_through_the_cli_loads_in_both_libraries(trained_colbert):
    from sentence_transformers.multi_vector_encoder import MultiVectorEncoder

    record = json.loads((trained_colbert / "embedkit_training.json").read_text())
    assert record["steps"] == 3 and record["config"]["objective"] == "colbert"
    assert "projection (384 -> 64" in record["base_model"]["initialised"]
    assert record["loss"] == "MultiVectorMultipleNegativesRankingLoss"
    model, reference = load_model(trained_colbert, token_dtype="float32"), MultiVectorEncoder(str(trained_colbert))
    assert model.kind == "multivector" and model.dim == 64 and model.settings["max_length"] == 48
    ours, theirs = model.encode_queries(QUERIES), reference.encode_query(QUERIES, convert_to_numpy=True)
    assert list(ours.lengths) == [len(t) for t in theirs] == [32, 32, 32]  # expanded to ColBERT's 32 query tokens
    assert all(np.allclose(ours.row(i), t, rtol=0, atol=1e-5) for i, t in enumerate(theirs))


@pytest.mark.parametrize("pool_factor", [None, 2])
def test_the_encode_command_stores_the_librarys_token_vectors(trained_colbert, scifact_subset, tmp_path, pool_factor):
    """Float32 storage equals ``MultiVectorEncoder.encode_document`` (within 1e-5, same lengths, also after the
    library's hierarchical token pooling); float16, the default, is that rounded once."""
    from sentence_transformers.multi_vector_encoder import MultiVectorEncoder
    from sentence_transformers.multi_vector_encoder.modules import HierarchicalTokenPooling

    pooled = ["--pool-factor", str(pool_factor)] if pool_factor else []
    base = ["encode", "-m", str(trained_colbert), "-d", str(scifact_subset), "--shard-size", "64", *pooled]
    done = embedkit_here(*base, "--token-dtype", "float32", "-o", str(tmp_path / "f32"))
    assert done.returncode == 0, done.stderr
    done = embedkit_here(*base, "-o", str(tmp_path / "f16"))
    assert done.returncode == 0, done.stderr
    exact, half = EmbeddingsFolder.open(tmp_path / "f32"), EmbeddingsFolder.open(tmp_path / "f16")
    assert exact.multivector and exact.settings["pool_factor"] == (pool_factor or 1)
    stored, stored_half = exact.embeddings(), half.embeddings()
    assert stored.vectors.dtype == np.float32 and stored_half.vectors.dtype == np.float16
    assert np.array_equal(stored.offsets, stored_half.offsets)
    assert np.array_equal(stored.vectors.astype(np.float16), stored_half.vectors)
    assert all("tokens" in shard and shard["tokens"]["bytes_per_row"] > 0 for shard in half.manifest["shards"])

    from embedkit.data.beir import doc_text, load_corpus

    texts = [doc_text(row) for row in load_corpus(scifact_subset / "corpus.jsonl")]
    pooling = HierarchicalTokenPooling(pool_factor=pool_factor) if pool_factor else None
    reference = MultiVectorEncoder(str(trained_colbert))
    theirs = reference.encode_document(texts[:40], convert_to_numpy=True, token_pooling=pooling)
    assert list(stored.lengths[:40]) == [len(t) for t in theirs]
    assert all(np.allclose(stored.row(i), t, rtol=0, atol=1e-5) for i, t in enumerate(theirs))
    if pool_factor:  # pooling keeps about half of each document's token vectors
        unpooled = reference.encode_document(texts[:40], convert_to_numpy=True)
        assert sum(len(t) for t in theirs) < 0.6 * sum(len(t) for t in unpooled)


def test_exact_maxsim_equals_the_librarys(colbert_folder, scifact_subset):
    """embedkit's blocked MaxSim over stored token rows equals sentence-transformers' ``maxsim`` (float32)."""
    from sentence_transformers.multi_vector_encoder import maxsim as library_maxsim

    from embedkit.data.beir import doc_text, load_corpus

    model = load_model(colbert_folder, token_dtype="float32")
    texts = [doc_text(row) for row in load_corpus(scifact_subset / "corpus.jsonl")][:60]
    queries, documents = model.encode_queries(QUERIES), model.encode_documents(texts)
    ours = maxsim(queries, documents, budget=4096)  # small blocks: many block edges crossed
    theirs = library_maxsim([queries.row(i) for i in range(len(queries))],
                            [documents.row(i) for i in range(len(documents))]).numpy()  # fmt: skip
    assert np.allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    top = [np.argsort(-scores, axis=1, kind="stable")[:, :10] for scores in (ours, theirs)]
    assert (top[0] == top[1]).all()


@settings(max_examples=60, deadline=None)
@given(
    query_lengths=st.lists(st.integers(0, 6), min_size=1, max_size=5),
    document_lengths=st.lists(st.integers(0, 12), min_size=1, max_size=30),
    budget=st.sampled_from([1, 5, 64, 1 << 20]),
    scale=st.sampled_from([1e-3, 1.0, 1e3]),
    seed=st.integers(0, 2**16),
)
def test_maxsim_blocks_equal_a_plain_oracle(query_lengths, document_lengths, budget, scale, seed):
    """Documents sorted by length and padded per block give, for any lengths (empty rows too), block size and scale
    (all-negative products too), what the definition gives: the best product per query token, summed; 0 for an empty
    row."""
    from embedkit.multivector import TokenRows

    rng = np.random.default_rng(seed)

    def rows(lengths: list[int], dtype) -> TokenRows:
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return TokenRows(offsets, (rng.standard_normal((offsets[-1], 8)) * scale).astype(dtype))

    queries, documents = rows(query_lengths, np.float32), rows(document_lengths, np.float16)
    expected = np.zeros((len(queries), len(documents)))
    for i in range(len(queries)):
        for j in range(len(documents)):
            if query_lengths[i] and document_lengths[j]:
                products = queries.row(i).astype(np.float64) @ documents.row(j).astype(np.float64).T
                expected[i, j] = products.max(axis=1).sum()
    assert np.allclose(maxsim(queries, documents, budget), expected, rtol=1e-5, atol=1e-5 * scale * scale)
