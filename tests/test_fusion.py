"""Run fusion: reciprocal-rank fusion and normalised interpolation, checked by hand and against pyserini's fusion."""

from __future__ import annotations

import pytest

from embedkit import EmbedkitError, read_run
from embedkit.data.trec import ranked
from embedkit.search.fusion import fuse, min_max, normalized_interpolation, reciprocal_rank_fusion

A = {"q": {"d1": 3.0, "d2": 2.0, "d3": 1.0}}
B = {"q": {"d3": 10.0, "d4": 5.0}}


def test_rrf_by_hand():
    fused = reciprocal_rank_fusion([A, B], rrf_k=60, depth=None, k=None)["q"]
    assert fused == pytest.approx({"d3": 1 / 63 + 1 / 61, "d1": 1 / 61, "d2": 1 / 62, "d4": 1 / 62})
    assert list(fused) == ["d3", "d1", "d4", "d2"]  # equal scores: doc id descending, as trec_eval ranks them


def test_rrf_depth_and_k():
    fused = reciprocal_rank_fusion([A, B], rrf_k=60, depth=1, k=2)["q"]
    assert fused == pytest.approx({"d3": 1 / 61, "d1": 1 / 61})


def test_interpolation_by_hand():
    fused = normalized_interpolation([A, B], weights=[0.25, 0.75], depth=None, k=None)["q"]
    # A min-max: d1 1, d2 0.5, d3 0; B: d3 1, d4 0.
    assert fused == pytest.approx({"d1": 0.25, "d2": 0.125, "d3": 0.75, "d4": 0.0})
    assert min_max([("x", 2.0), ("y", 2.0)]) == {"x": 1.0, "y": 1.0}


def test_queries_missing_from_one_run_still_fused():
    fused = fuse([A, {"other": {"d9": 1.0}}], "rrf")
    assert set(fused) == {"q", "other"} and list(fused["other"]) == ["d9"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "borda"}, "unknown fusion method 'borda'"),
        ({"method": "interpolation", "weights": [1.0]}, "1 fusion weights for 2 runs"),
        ({"method": "rrf", "weights": [0.5, 0.5]}, "takes no weights"),
    ],
)
def test_fusion_user_errors(kwargs, message):
    with pytest.raises(EmbedkitError, match=message):
        fuse([A, B], **kwargs)


def test_one_run_cannot_be_fused():
    with pytest.raises(EmbedkitError, match="at least two runs"):
        fuse([A])


def _pyserini_run(fused) -> dict[str, dict[str, float]]:
    data = fused.run_data
    return {
        str(topic): dict(zip(group["docid"].astype(str), group["score"].astype(float)))
        for topic, group in data.groupby("topic")
    }


def test_matches_pyserini_fusion_on_real_runs(scifact_reports):
    """Fusing the real SciFact dense and BM25 runs gives pyserini's RRF and min-max fusion, hit for hit.

    pyserini orders equal scores by doc id ascending, embedkit as trec_eval scores them (descending, ``TIE_BREAK``):
    the fused lists are compared whole (depth 100 of each run, no cut) in embedkit's order."""
    from pyserini.fusion import reciprocal_rank_fusion as pyserini_rrf
    from pyserini.trectools import AggregationMethod, RescoreMethod, TrecRun

    paths = [scifact_reports["dense"] / "run.trec", scifact_reports["bm25"] / "run.trec"]
    ours_in = [read_run(path) for path in paths]
    theirs_in = [TrecRun(str(path)) for path in paths]

    ours = reciprocal_rank_fusion(ours_in, rrf_k=60, depth=100, k=None)
    theirs = _pyserini_run(pyserini_rrf(theirs_in, rrf_k=60, depth=100, k=200))
    assert ours.keys() == theirs.keys()
    for query_id in ours:
        theirs[query_id] = dict(ranked(theirs[query_id]))
        assert list(ours[query_id]) == list(theirs[query_id])
        assert list(ours[query_id].values()) == pytest.approx(list(theirs[query_id].values()))

    # pyserini's min-max rescoring then a weighted sum is our interpolation (runs already cut at their depth).
    ours = normalized_interpolation(ours_in, weights=[0.3, 0.7], depth=None, k=None)
    scaled = [
        run.clone().rescore(RescoreMethod.NORMALIZE).rescore(RescoreMethod.SCALE, scale=weight)
        for run, weight in zip(theirs_in, (0.3, 0.7))
    ]
    theirs = _pyserini_run(TrecRun.merge(scaled, AggregationMethod.SUM, k=10_000))
    for query_id in ours:
        assert ours[query_id] == pytest.approx(theirs[query_id])
