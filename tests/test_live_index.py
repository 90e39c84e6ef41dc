"""An index that lives: random adds, deletes and upserts equal a rebuild, filters equal exact search over the matching
documents, and the store and the vectors agree after each change (real SciFact vectors of the default model)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from embedkit.errors import EmbedkitError
from embedkit.index import Index
from embedkit.index.filters import compile_filter
from embedkit.index.live import LiveIndex

CUT = 1500  # documents in the first snapshot; the changes draw new vectors from documents CUT .. 3999
STUDY = Path(__file__).resolve().parents[1] / "benchmarks" / "living_index_scifact.py"


def random_changes(*args, **kwargs) -> dict[str, int]:
    """The study's generator of seeded changes (``benchmarks/living_index_scifact.py``), so both check one thing."""
    spec = importlib.util.spec_from_file_location("living_index_scifact", STUDY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.random_changes(*args, **kwargs)


FIELDS = {"bucket": "int", "source": "text", "score": "real"}


@pytest.fixture(scope="module")
def vectors(scifact_embeddings):
    return np.asarray(scifact_embeddings.embeddings(), dtype=np.float32), scifact_embeddings.ids()


def _metadata(i: int) -> dict:
    return {"bucket": i % 1000, "source": ("pubmed", "arxiv", "web")[i % 3], "score": (i % 97) / 97}


def test_a_thousand_random_changes_equal_a_rebuild(vectors, tmp_path):
    matrix, ids = vectors
    Index.build(matrix[:CUT], ids[:CUT], "Flat", use_gpu=False).save(tmp_path / "idx")
    live = LiveIndex.open(tmp_path / "idx", fields=FIELDS)
    state = random_changes(live, matrix[:4000], ids[:4000], CUT, 1000, 7, metadata=_metadata)
    final_ids = sorted(state)
    rebuilt = Index.build(matrix[[state[i] for i in final_ids]], final_ids, "Flat", use_gpu=False)
    queries = matrix[4000:4100]
    for searched in (live, LiveIndex.load_live(tmp_path / "idx")):  # in memory, and replayed from disk
        assert len(searched) == len(final_ids)
        scores, hits = searched.search(queries, 10)
        expected_scores, expected_hits = rebuilt.search(queries, 10)
        assert hits == expected_hits
        np.testing.assert_allclose(scores, expected_scores, atol=1e-6)
        report = searched.check()
        assert report["ok"], report["problems"]
        assert report["documents"] == len(final_ids) and report["compaction"]["version"] > 0


SELECTIVITY = [
    ("bucket < 500", lambda meta: meta["bucket"] < 500, 0.5),
    ("bucket < 50 and source in ['pubmed', 'arxiv', 'web']", lambda meta: meta["bucket"] < 50, 0.05),
    ("not (bucket != 7)", lambda meta: meta["bucket"] == 7, 0.001),
]


@pytest.mark.parametrize("expression,keeps,share", SELECTIVITY)
def test_a_filter_equals_exact_search_over_the_matching_documents(vectors, tmp_path, expression, keeps, share):
    matrix, ids = vectors
    Index.build(matrix[:1000], ids[:1000], "Flat", use_gpu=False).save(tmp_path / "idx")
    live = LiveIndex.open(tmp_path / "idx", fields=FIELDS)
    live.upsert(ids[:2000], matrix[:2000], metadata=[_metadata(i) for i in range(2000)])  # metadata for all
    keep = [i for i in range(2000) if keeps(_metadata(i))]
    assert len(keep) == round(2000 * share)
    exact = Index.build(matrix[keep], [ids[i] for i in keep], "Flat", use_gpu=False)
    queries = matrix[4000:4050]
    scores, hits = live.search(queries, 10, filter=expression)
    expected_scores, expected_hits = exact.search(queries, 10)
    assert hits == expected_hits and all(len(row) == min(10, len(keep)) for row in hits)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-6)


def test_an_approximate_index_searches_a_small_filter_exactly_and_returns_k_when_k_match(vectors, tmp_path):
    matrix, ids = vectors
    Index.build(matrix[:2000], ids[:2000], "IVF32,Flat", use_gpu=False, nprobe=1).save(tmp_path / "idx")
    live = LiveIndex.open(tmp_path / "idx", fields=FIELDS)
    live.upsert(ids[:2000], matrix[:2000], metadata=[_metadata(i) for i in range(2000)])
    live.delete(ids[:5])
    expression = "bucket in [1, 2, 3] or bucket < 30 and not source == 'web'"
    keep = [i for i in range(5, 2000) if i % 1000 in (1, 2, 3) or (i % 1000 < 30 and i % 3 != 2)]
    exact = Index.build(matrix[keep], [ids[i] for i in keep], "Flat", use_gpu=False)
    assert live.search(matrix[4000:4020], 10, filter=expression)[1] == exact.search(matrix[4000:4020], 10)[1]
    live.FULL_SCAN_BYTES = 0  # no full scan: IVF's own search, and the exact one where it finds fewer than k
    _, hits = live.search(matrix[4000:4020], 10, filter=expression)
    assert len(keep) > 10 and all(len(row) == 10 and set(row) <= {ids[i] for i in keep} for row in hits)
    assert live.check()["ok"]


def test_updates_are_refused_where_they_would_lose_or_mix_data(vectors, tmp_path):
    matrix, ids = vectors
    Index.build(matrix[:100], ids[:100], "Flat", use_gpu=False, model_settings={"model": "m"}).save(tmp_path / "idx")
    live = LiveIndex.open(tmp_path / "idx", fields=FIELDS)
    cases = [
        (lambda: live.add(ids[:1], matrix[:1]), "already in the index; use upsert"),
        (lambda: live.delete(["no-such-doc"]), "'no-such-doc' is not in the index"),
        (lambda: live.add(["x"], matrix[:1], model_settings={"model": "other"}), "another model"),
        (lambda: live.add(["x"], matrix[:1], metadata=[{"bucket": "7"}]), "is not an int"),
        (lambda: live.add(["x"], matrix[:1, :5]), "vectors"),
        (lambda: live.add(["x"], matrix[:1], metadata=[{"when": {1, 2}}]), "document 'x': not JSON"),
        (lambda: live.add(["x"], matrix[:1], metadata=[{"note": float("nan")}]), "document 'x': not JSON"),
        (lambda: live.search(matrix[:1], 5, filter="year > 1"), "not a filterable field"),
        (lambda: LiveIndex.open(tmp_path / "idx", fields={"other": "int"}), "other filterable fields"),
    ]
    for call, message in cases:
        with pytest.raises(EmbedkitError, match=message):
            call()
    assert len(live) == 100 and live.check()["ok"] and live.version == 0  # nothing was half-written
    live.add(["x"], matrix[:1], model_settings={"model": "m"}, metadata=[{"bucket": 3}])
    assert live.document("x")["metadata"] == {"bucket": 3} and live.document(ids[0])["key"] == 0


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
@example("\x00")  # Python 3.11.2's parser raises ValueError for it (3.11.7's a SyntaxError): found on a CI run
@example("year > 1 \x00")
def test_any_filter_text_is_sql_or_one_line_error(text):
    try:
        sql, params = compile_filter(text, FIELDS)
    except EmbedkitError as err:
        assert "\n" not in str(err) and "--filter" in str(err)
    else:
        assert sql.count("?") == len(params)


def test_searches_during_writes_see_the_state_before_or_after_each_change(vectors, tmp_path):
    import threading

    matrix, ids = vectors
    Index.build(matrix[:500], ids[:500], "Flat", use_gpu=False).save(tmp_path / "idx")
    live = LiveIndex.open(tmp_path / "idx")
    group = [f"g{i}" for i in range(20)]
    rows = np.random.default_rng(0).standard_normal((20, matrix.shape[1])).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    live.add(group, rows)
    query = rows.sum(axis=0, keepdims=True)  # the group's 20 vectors score highest; flipped, they score lowest
    done, seen = threading.Event(), []

    def search() -> None:
        while not done.is_set():
            hits = live.search(query, 20)[1][0]
            seen.append(len(set(hits) & set(group)) if len(set(hits) - {None}) == 20 else -1)  # -1: a hole

    readers = [threading.Thread(target=search) for _ in range(2)]
    for reader in readers:
        reader.start()
    for flip in range(200):  # each upsert replaces all 20 vectors in one change
        live.upsert(group, rows if flip % 2 else -rows)
    done.set()
    for reader in readers:
        reader.join()
    assert len(seen) > 10 and set(seen) <= {0, 20}, sorted(set(seen))


def test_an_on_disk_ivf_takes_the_same_changes_as_one_in_memory(vectors, tmp_path):
    from embedkit.index import BuildSettings, Vectors
    from embedkit.index.ondisk import build_ondisk

    matrix, ids = vectors
    settings = BuildSettings("IVF32,Flat", use_gpu=False, nprobe=4)
    cut = Vectors.of(matrix[:CUT], ids[:CUT])
    Index.from_vectors(cut, settings).save(tmp_path / "memory")
    build_ondisk(cut, tmp_path / "disk", settings)  # the same seeded training: the same quantizer
    changed = {}
    for name in ("memory", "disk"):
        live = LiveIndex.open(tmp_path / name, fields=FIELDS, vectors=matrix[:CUT])
        state = random_changes(live, matrix[:2500], ids[:2500], CUT, 300, 3, metadata=_metadata)
        changed[name] = LiveIndex.load_live(tmp_path / name)
        assert changed[name].check()["ok"] and len(changed[name]) == len(state)
    assert changed["disk"].meta["on_disk"] and changed["disk"].meta["compaction"]["removed"] > 0
    queries = matrix[4000:4100]
    (memory_scores, memory_hits), (disk_scores, disk_hits) = (changed[n].search(queries, 10) for n in changed)
    assert disk_hits == memory_hits
    np.testing.assert_allclose(disk_scores, memory_scores, atol=1e-6)
    filtered = [changed[n].search(queries, 10, filter="bucket < 100")[1] for n in changed]
    assert filtered[0] == filtered[1] and all(len(row) == 10 for row in filtered[0])


@pytest.mark.parametrize("text", ["not " * 3000 + "bucket == 1", "(" * 2000 + "bucket == 1" + ")" * 2000, "x" * 20000])
def test_a_huge_or_deep_filter_is_one_line(text):
    with pytest.raises(EmbedkitError, match="--filter"):
        compile_filter(text, FIELDS)


def test_a_filter_matching_nothing_an_emptied_index_and_a_huge_value(tmp_path):
    """No hits, not an error, when no document matches or none is left; an integer SQLite cannot store is one line."""
    import numpy as np

    from embedkit.errors import EmbedkitError
    from embedkit.index import Index
    from embedkit.index.registry import open_live

    vectors = np.random.default_rng(0).normal(size=(20, 8)).astype(np.float32)
    Index.build(vectors, [f"d{i}" for i in range(20)]).save(tmp_path / "idx")
    live = open_live(tmp_path / "idx", fields={"year": "int"})
    live.add(["n"], vectors[:1], metadata=[{"year": 2000}])
    assert live.search(vectors[:2], 5, filter="year > 3000").ids == [[], []]
    for bad in ("year > 1e300", "year < -99999999999999999999"):
        with pytest.raises(EmbedkitError, match="outside the 64-bit integers") as refused:
            live.search(vectors[:2], 5, filter=bad)
        assert "\n" not in str(refused.value)
    with pytest.raises(EmbedkitError, match="outside the 64-bit integers"):
        live.add(["m"], vectors[:1], metadata=[{"year": 10**30}])
    live.delete([f"d{i}" for i in range(20)] + ["n"])
    assert live.search(vectors[:2], 5).ids == [[], []]
