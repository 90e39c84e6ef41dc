"""FAISS indexes over the real SciFact embeddings: approximate recall, save/load, pyserini layout, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from embedkit import EmbedkitError, Index


@pytest.fixture(scope="module")
def vectors(scifact_embeddings):
    return scifact_embeddings.embeddings(), scifact_embeddings.ids()


@pytest.fixture(scope="module")
def query_vectors(default_model, scifact):
    return default_model.encode_queries(list(scifact.split_queries("test").values()))


@pytest.fixture(scope="module")
def exact(vectors, query_vectors):
    embeddings, ids = vectors
    return Index.build(embeddings, ids, "Flat").search(query_vectors, 10)


def _recall_at_10(exact_hits: list[list[str]], approx_hits: list[list[str]]) -> float:
    return float(np.mean([len(set(a) & set(b)) / len(a) for a, b in zip(exact_hits, approx_hits)]))


@pytest.mark.parametrize(
    ("factory", "params"),
    [("IVF64,Flat", {"nprobe": 24}), ("HNSW32", {"ef_search": 128})],
)
def test_approximate_recall_against_flat(vectors, query_vectors, exact, factory, params, tmp_path):
    """Acceptance: recall@10 against Flat >= 0.95 at the chosen parameters; reload gives identical results."""
    embeddings, ids = vectors
    index = Index.build(embeddings, ids, factory, **params)
    scores, hits = index.search(query_vectors, 10)
    recall = _recall_at_10(exact[1], hits)
    print(f"{factory} {params}: recall@10 vs Flat = {recall:.4f}")
    assert recall >= 0.95
    reloaded = Index.load(index.save(tmp_path / "idx"))
    again_scores, again_hits = reloaded.search(query_vectors, 10)
    assert again_hits == hits and np.array_equal(again_scores, scores)
    assert reloaded.meta["factory"] == factory and reloaded.search_params == index.search_params


def test_flat_matches_numpy_inner_product(vectors, query_vectors, exact):
    embeddings, ids = vectors
    scores = query_vectors[:5] @ embeddings.T
    for row, hits in zip(scores, exact[1][:5]):
        assert [ids[j] for j in np.argsort(-row)[:10]] == hits


def test_saved_folder_is_pyserini_layout(vectors, tmp_path, default_model):
    embeddings, ids = vectors
    folder = Index.build(embeddings[:100], ids[:100], model_settings=default_model.settings).save(tmp_path / "i")
    assert sorted(p.name for p in folder.iterdir()) == ["docid", "index", "meta.json"]
    assert (folder / "docid").read_text().splitlines() == ids[:100]


def test_unknown_factory_is_a_user_error(vectors):
    with pytest.raises(EmbedkitError, match="factory string 'IVFoops'"):
        Index.build(vectors[0][:10], vectors[1][:10], "IVFoops")


def test_query_dimension_mismatch(vectors):
    index = Index.build(vectors[0][:10], vectors[1][:10])
    with pytest.raises(EmbedkitError, match="query dimension 768 does not match the index dimension 384"):
        index.search(np.zeros((1, 768), dtype=np.float32), 5)


def test_index_folder_without_docid(vectors, tmp_path):
    folder = Index.build(vectors[0][:10], vectors[1][:10]).save(tmp_path / "i")
    (folder / "docid").unlink()
    with pytest.raises(EmbedkitError, match="has no 'docid' file"):
        Index.load(folder)


def test_docid_count_must_match(vectors, tmp_path):
    folder = Index.build(vectors[0][:10], vectors[1][:10]).save(tmp_path / "i")
    (folder / "docid").write_text("\n".join(vectors[1][:9]) + "\n")
    with pytest.raises(EmbedkitError, match="docid: changed since it was written"):  # meta.json's sha256
        Index.load(folder)
    meta = json.loads((folder / "meta.json").read_text())
    del meta["files"]  # as a pyserini index folder has none
    (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(EmbedkitError, match="holds 10 vectors but 'docid' lists 9 ids"):
        Index.load(folder)


def test_load_refuses_another_model(vectors, tmp_path, default_model):
    folder = Index.build(vectors[0][:10], vectors[1][:10], model_settings=default_model.settings).save(tmp_path / "i")
    Index.load(folder, model_settings=default_model.settings)
    other = {**default_model.settings, "pooling": "cls", "max_length": 128}
    with pytest.raises(EmbedkitError, match=r"built with another model .*pooling"):
        Index.load(folder, model_settings=other)


def test_search_parameter_the_index_lacks(vectors):
    with pytest.raises(EmbedkitError, match="no search parameter 'nprobe'"):
        Index.build(vectors[0][:10], vectors[1][:10], "Flat", nprobe=4)


def test_per_call_search_parameters_do_not_stick(vectors, tmp_path):
    """nprobe/efSearch given to one search apply to that search only, like rescore; save() keeps the index's own."""
    embeddings, ids = vectors
    index = Index.build(embeddings[:2000], ids[:2000], "IVF32,Flat", nprobe=2)
    queries = embeddings[2000:2050]
    narrow = index.search(queries, 10)
    wide = index.search(queries, 10, nprobe=32)
    assert narrow[1] != wide[1]  # nprobe 32 visits every list: other hits than nprobe 2
    assert index.search(queries, 10)[1] == narrow[1]  # back to the index's own nprobe
    assert index.search_params == {"nprobe": 2}
    saved = json.loads((index.save(tmp_path / "ivf") / "meta.json").read_text())
    assert saved["search_params"] == {"nprobe": 2}
    plain = Index.build(embeddings[:2000], ids[:2000], "IVF32,Flat")
    plain.search(queries, 10, nprobe=8)
    assert plain.search(queries, 10)[1] == plain.search(queries, 10, nprobe=1)[1]  # FAISS's default comes back
