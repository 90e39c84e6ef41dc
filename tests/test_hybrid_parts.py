"""A hybrid fuses any two or three of dense, BM25 and SPLADE as one retriever spec: the fused run is reciprocal-rank
fusion of the parts' own runs, the report records both models, and the spec round-trips through the CLI, the
report and the reproduction YAML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embedkit import EmbedkitError, EvaluateOptions, evaluate, load_model
from embedkit.data.trec import ranked
from embedkit.search import BM25, Dense, Fusion, Hybrid, Sparse
from embedkit.search.retriever import from_dict, to_dict


@pytest.fixture(scope="module")
def sparse_model(splade_folder):
    return load_model(splade_folder, max_length=32, max_active_dims=48)


def test_a_three_way_hybrid_is_rrf_of_its_parts_own_runs(
    default_model, sparse_model, splade_folder, scifact_subset, tmp_path
):
    alone = {
        "dense": evaluate(default_model, scifact_subset, "test", Dense(), output=tmp_path / "d", cache_dir=tmp_path),
        "bm25": evaluate(None, scifact_subset, "test", BM25(), output=tmp_path / "b", cache_dir=tmp_path),
        "splade": evaluate(sparse_model, scifact_subset, "test", Sparse(), output=tmp_path / "s", cache_dir=tmp_path),
    }
    runs = {name: _run(report["folder"]) for name, report in alone.items()}
    spec = Hybrid(Dense(), BM25(), Fusion("rrf", depth=50), Sparse())
    options = EvaluateOptions(sparse_model=sparse_model)
    report = evaluate(default_model, scifact_subset, "test", spec, output=tmp_path / "h", cache_dir=tmp_path,
                      options=options, k=10)  # fmt: skip
    fused = _run(report["folder"])
    for query_id in runs["dense"]:
        scores: dict[str, float] = {}
        for run in runs.values():
            for rank, doc_id in enumerate(list(run[query_id])[:50], start=1):
                scores[doc_id] = scores.get(doc_id, 0.0) + 1 / (60 + rank)
        expected = [doc for doc, _ in ranked(scores)[:10]]
        assert list(fused[query_id]) == expected
    assert set(report["component_metrics"]) == {"dense", "bm25", "splade"}
    assert report["model"].get("kind", "dense") == "dense" and report["sparse_model"]["kind"] == "sparse"
    assert "__Flat-bm25-bm25s-splade-exact-rrf__" in report["folder"]
    assert report["metrics"]["ndcg_at_10"] > 0
    from embedkit.report.markdown import render_markdown

    shown = render_markdown(report)
    assert f"all-MiniLM-L6-v2 + {splade_folder}" in shown and "sparse_model.max_active_dims | `48`" in shown


def _run(folder: str) -> dict[str, dict[str, float]]:
    """A report's run.trec, each query's hits in rank order."""
    run: dict[str, dict[str, float]] = {}
    for line in (Path(folder) / "run.trec").read_text().splitlines():
        query_id, _, doc_id, _, score, _ = line.split()
        run.setdefault(query_id, {})[doc_id] = float(score)
    return run


def test_a_hybrid_needs_two_parts_its_weights_one_per_part_and_both_models():
    with pytest.raises(EmbedkitError, match="two or more parts"):
        Hybrid(Dense(), None).check()
    with pytest.raises(EmbedkitError, match="2 weights for 3 parts"):
        Hybrid(Dense(), BM25(), Fusion("interpolation", [0.5, 0.5]), Sparse()).check()
    Hybrid(None, BM25(), Fusion("interpolation", [0.3, 0.7]), Sparse()).check()
    with pytest.raises(EmbedkitError, match="needs the sparse model"):
        evaluate(None, "scifact", "test", Hybrid(Dense(), None, sparse=Sparse()))


def test_the_spec_round_trips_and_old_hybrids_keep_their_shape():
    assert from_dict({"type": "hybrid"}) == Hybrid() and "sparse" not in to_dict(Hybrid())
    three = Hybrid(Dense(), BM25(k1=1.2), Fusion("interpolation", [0.2, 0.3, 0.5]), Sparse(index="impact"))
    assert from_dict(json.loads(json.dumps(to_dict(three)))) == three
    two = Hybrid(None, BM25(), sparse=Sparse())
    assert to_dict(two)["dense"] is None and from_dict(to_dict(two)) == two
    with pytest.raises(EmbedkitError, match=r"retriever\.sparse\.kind"):
        from_dict({"type": "hybrid", "sparse": {"kind": "x"}})


def test_the_cli_fuses_bm25_and_splade_and_refuses_what_does_not_fit(splade_folder, scifact_subset, tmp_path):
    from conftest import embedkit_here

    common = ["evaluate", "-d", str(scifact_subset), "-o", str(tmp_path / "r"), "--cache-dir", str(tmp_path)]
    done = embedkit_here(*common, "-m", str(splade_folder), "--max-length", "24", "-k", "10",
                         "--retriever", "hybrid", "--hybrid-parts", "splade,bm25")  # fmt: skip
    assert done.returncode == 0, done.stderr
    (folder,) = (tmp_path / "r").iterdir()
    recorded = json.loads((folder / "report.json").read_text())["retriever"]
    assert from_dict(recorded) == Hybrid(None, BM25(), sparse=Sparse())
    for extra, flag in (
        (["--retriever", "hybrid", "--hybrid-parts", "dense,splade"], "--sparse-model"),
        (["--retriever", "hybrid", "--hybrid-parts", "dense"], "--hybrid-parts"),
        (["--retriever", "hybrid", "--hybrid-parts", "dense,dense"], "--hybrid-parts"),
        (["--retriever", "dense", "--hybrid-parts", "dense,bm25"], "--hybrid-parts"),
        (["--retriever", "dense", "--sparse-model", str(splade_folder)], "--sparse-model"),
        (["--retriever", "hybrid", "--hybrid-parts", "bm25,splade", "--factory", "HNSW32"], "--factory"),
        (["--retriever", "hybrid", "--fusion", "interpolation", "--fusion-weights", "1,1,1"], "--fusion-weights"),
    ):
        refused = embedkit_here(*common, *extra)
        assert refused.returncode == 2 and flag in refused.stderr, (extra, refused.stderr)
        assert len(refused.stderr.strip().splitlines()) == 1


def test_any_first_stages_fuse_as_parts_colbert_with_bm25_and_sparse(colbert_folder, sparse_model, scifact_subset,
                                                                    tmp_path):  # fmt: skip
    """``Hybrid(parts=[...])``: a ColBERT run (the run's model), BM25, and a SPLADE run with its own model, fused by
    RRF of their own runs; each part's model is recorded; the spec round-trips through its mapping."""
    from embedkit.search import LateInteraction

    colbert = load_model(colbert_folder)
    late = evaluate(colbert, scifact_subset, "test", LateInteraction(), output=tmp_path / "c", cache_dir=tmp_path)
    alone = {
        "colbert": late,
        "bm25": evaluate(None, scifact_subset, "test", BM25(), output=tmp_path / "b", cache_dir=tmp_path),
        "splade": evaluate(sparse_model, scifact_subset, "test", Sparse(), output=tmp_path / "s", cache_dir=tmp_path),
    }
    runs = {name: _run(report["folder"]) for name, report in alone.items()}
    spec = Hybrid(parts=[LateInteraction(), BM25(), Sparse(model=str(sparse_model.local_path))],
                  fusion=Fusion("rrf", depth=50))  # fmt: skip
    assert spec.dense is None and from_dict(json.loads(json.dumps(to_dict(spec)))) == spec
    options = EvaluateOptions(part_models={"splade": sparse_model})  # loaded with its cap, over the spec's path
    report = evaluate(colbert, scifact_subset, "test", spec, output=tmp_path / "h", cache_dir=tmp_path, k=10,
                      options=options)  # fmt: skip
    fused = _run(report["folder"])
    for query_id in runs["bm25"]:
        scores: dict[str, float] = {}
        for run in runs.values():
            for rank, doc_id in enumerate(list(run.get(query_id, {}))[:50], start=1):
                scores[doc_id] = scores.get(doc_id, 0.0) + 1 / (60 + rank)
        assert list(fused.get(query_id, {})) == [doc for doc, _ in ranked(scores)[:10]]
    assert set(report["component_metrics"]) == {"colbert", "bm25", "splade"}
    assert report["model"]["kind"] == "multivector" and report["part_models"]["splade"]["kind"] == "sparse"
    assert report["retriever"]["parts"][2]["model"] == str(sparse_model.local_path)


def test_the_older_hybrid_form_keeps_its_mapping_and_parts_refuse_a_mix():
    assert to_dict(Hybrid(Dense(), BM25())) == {
        "type": "hybrid",
        "dense": {"factory": "Flat", "metric": "ip", "nprobe": None, "ef_search": None},
        "bm25": {"backend": "bm25s", "k1": 0.9, "b": 0.4},
        "fusion": {"method": "rrf", "weights": None, "depth": 1000, "rrf_k": 60},
    }
    with pytest.raises(EmbedkitError, match="not both"):
        Hybrid(Dense(factory="HNSW32"), parts=[BM25(), Dense()])
    with pytest.raises(EmbedkitError, match="two or more parts"):
        Hybrid(parts=[BM25()]).check()
    with pytest.raises(EmbedkitError, match="parts\\[1\\]"):
        from_dict({"type": "hybrid", "parts": ["bm25", {"type": "hybrid"}]})
