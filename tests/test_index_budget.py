"""Choosing an index by a memory budget: the candidates for (n, budget) pairs, and ``embedkit index --max-memory``
end to end on the real SciFact embeddings, with its refusals."""

from __future__ import annotations

import json
import subprocess

import faiss
import pytest
from conftest import run_cli

from embedkit import EmbedkitError, Index
from embedkit.index.budget import parse_size, plan_candidates

GIB, MIB = 1 << 30, 1 << 20


def embedkit(*args: object) -> subprocess.CompletedProcess:
    return run_cli(args)


def test_sizes_parse():
    assert parse_size("512MiB") == 512 * MIB
    assert parse_size("0.5GiB") == GIB // 2
    assert parse_size("2GB") == 2_000_000_000
    assert parse_size(" 3 kib ") == 3072
    for bad in ("2", "2 GiBs", "-1GiB", "GiB", "0MiB", "1e3MB"):
        with pytest.raises(EmbedkitError, match="option '--max-memory'"):
            parse_size(bad)


@pytest.mark.parametrize(
    ("count", "budget", "family"),
    [
        (5_183, GIB, {"flat"}),  # small and it fits: exact search only
        (1_000_000, 4 * GIB, {"flat", "hnsw", "ivf-flat"}),
        (1_000_000, GIB, {"ivf-sq8"}),  # 1.43 GiB of floats: 1 byte a dimension
        (1_000_000, 200 * MIB, {"ivf-pq"}),  # no SQ8 either: product quantisation
        (100_000_000, 4 * GIB, {"ivf-pq"}),
    ],
)
def test_candidates_follow_the_budget(count, budget, family):
    plan = plan_candidates(count, 384, budget, train_size=100_000)
    fitting = [c for c in plan if c.fits]
    print(count, budget, [(c.factory, c.predicted_bytes) for c in plan])
    assert {c.family for c in fitting} == family
    assert all(c.predicted_bytes <= budget for c in fitting)
    assert all(not c.fits for c in plan if c.family not in family)
    for c in fitting:  # FAISS takes every string; IVF cells are bounded by the 100,000 training vectors
        faiss.index_factory(384, c.factory.removesuffix("np") if "PQ" in c.factory else c.factory)
        assert "IVF" not in c.factory or int(c.factory.split("IVF")[1].split(",")[0]) <= 100_000 // 39
    if "ivf-pq" in family:  # the largest code that fits, and the next smaller
        codes = [int(c.factory.rsplit("PQ", 1)[1].removesuffix("np")) for c in fitting]
        assert codes == sorted(codes, reverse=True) and len(codes) == 2
        larger = plan_candidates(count, 384, budget * 4, train_size=100_000)
        assert max(c.per_vector for c in larger if c.fits) >= max(c.per_vector for c in fitting)


def test_tight_budget_on_scifact(scifact_embeddings, tmp_path):
    """Acceptance: Flat (7.6 MiB) does not fit 4 MiB; the chosen index is smaller, meets recall@10 0.95 and its
    meta.json records every candidate with predicted and measured bytes and its sweep."""
    output = tmp_path / "budget"
    result = embedkit("index", "-e", scifact_embeddings.path, "-o", output, "--max-memory", "4MiB")
    assert result.returncode == 0, result.stderr
    print(result.stdout)
    assert "<- chosen" in result.stdout and "predicted" in result.stdout
    meta = json.loads((output / "meta.json").read_text())
    record = meta["memory_budget"]
    assert record["max_memory"] == 4 * MIB and record["chosen"] == meta["factory"] != "Flat"
    assert record["measured_bytes"] <= 4 * MIB
    assert (output / "index").stat().st_size <= 4 * MIB  # the file as written, which is what loading it takes
    by_factory = {row["factory"]: row for row in record["candidates"]}
    assert not by_factory["Flat"]["fits"] and by_factory["Flat"]["predicted_bytes"] > 4 * MIB
    chosen = by_factory[record["chosen"]]
    assert chosen["met"] and chosen["projected_bytes"] <= 4 * MIB and chosen["curve"]
    assert abs(chosen["projected_bytes"] - chosen["predicted_bytes"]) < 0.05 * chosen["predicted_bytes"]
    assert chosen["best"]["recall_at_k"] >= 0.95
    final = [point for point in record["final_curve"] if point["met"]]
    fastest = max(final, key=lambda p: p["qps"])["value"]
    assert final and meta["search_params"] == {"nprobe": max(fastest, chosen["best"]["value"])}
    loaded = Index.load(output)
    assert loaded.meta["factory"] == record["chosen"] and len(loaded) == len(scifact_embeddings.ids())


def test_refusals(scifact_embeddings, tmp_path):
    emb = scifact_embeddings.path
    cases = [
        (["--max-memory", "4 gigs"], "option '--max-memory': '4 gigs' is not a size"),
        (["--max-memory", "4MiB", "--factory", "HNSW32"], "option '--factory': --factory does nothing with --max-mem"),
        (["--max-memory", "100KiB"], "option '--max-memory': no index fits 100.00 KiB"),
        (["--target-ndcg-drop", "0.01"], "option '--target-ndcg-drop': works with --max-memory only"),
        (
            ["--max-memory", "4MiB", "--target-recall", "1"],
            "option '--max-memory': no index under 4.00 MiB reaches recall@10 >= 1.0: the best recall@10 reached is",
        ),
    ]
    for args, message in cases:
        result = embedkit("index", "-e", emb, "-o", tmp_path / "refused", *args)
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert not (tmp_path / "refused").exists()
