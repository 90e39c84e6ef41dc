"""FAISS factory strings are checked before FAISS sees them: what would abort, segfault or hang FAISS is one line.

The bad strings go through the real CLI (exit 2, one line, no native crash, before any index is built); the check's
parse is driven by hypothesis with small numbers in every parameter position, and everything it accepts is built,
trained, filled and searched in a subprocess, which must exit cleanly (a FAISS ``RuntimeError`` is fine).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from embedkit.errors import EmbedkitError
from embedkit.index import check_factory

DIM, COUNT = 32, 300  # the throw-away build's vectors


@pytest.fixture(scope="module")
def embeddings(tmp_path_factory, scifact_subset, default_model) -> Path:
    from embedkit import load_dataset
    from embedkit.encode.writer import encode_to_folder

    root = tmp_path_factory.mktemp("factory-check")
    return encode_to_folder(default_model, load_dataset(scifact_subset).corpus, root / "emb").path


def one_line_refusal(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    ("factory", "why"),
    [
        ("HNSW0", "HNSW's M must be between 2"),  # FAISS: assertion, exit 134
        ("HNSW1", "HNSW's M must be between 2"),  # FAISS: segfault, exit 139
        ("BHNSW0", "HNSW's M must be between 2"),
        ("IVF4_HNSW0,Flat", "HNSW's M must be between 2"),
        ("NSG8", "NSG's R must be between 16"),  # FAISS: never returns
        ("IDMap,Flat", "IDMap"),
        ("IVF4,PQ7", "dimension 384 does not divide"),
        ("IVF4,PQ8x0", "bits per code must be between 1"),  # FAISS: SIGFPE
        ("IVF4096,Flat", "needs at least 4096 training vectors, there are 150"),
    ],
)
def test_bad_factory_is_one_line_before_any_build(embeddings, tmp_path, factory, why):
    started = time.monotonic()
    result = run_cli(["index", "-e", str(embeddings), "-o", "idx", "--factory", factory], tmp_path, tmp_path)
    one_line_refusal(result, "option '--factory'", f"'{factory}'", why)
    assert time.monotonic() - started < 60
    assert not (tmp_path / "idx").exists()


@pytest.mark.parametrize("factory", ["HNSW8", "IVF4,PQ8x4", "BFlat"])
def test_good_factories_still_build(embeddings, tmp_path, factory):
    result = run_cli(["index", "-e", str(embeddings), "-o", "idx", "--factory", factory], tmp_path, tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"150 vectors indexed as '{factory}'" in result.stdout


@pytest.mark.parametrize(
    "factory",
    ["", " Flat", "HNSW1_Flat", "Flat,IDMap2", "RR0,Flat", "OPQ4_0,PQ4", "PCA0,Flat", "RQ0x8", "ZnLattice0x0_0",
     "NSG15", "IVF99999999999,Flat", "IVF4(HNSW0),Flat", "PQ4,Refine(HNSW1)", "PQ4x4fs_0", "BIVF4_HNSW1", "BHash4x9",
     "LSH", "IMI2x2,Flat", "BIVF-5", "IVF0,Flat", "Flat,PQ8", "HNSW2,Refine(IVF1,Flat)", "PQ4,Refine(PCA16,IVF4,SQ8)",
     7, None],
)  # fmt: skip
def test_library_check_refuses(factory):
    with pytest.raises(EmbedkitError) as refused:
        check_factory(factory, DIM, count=COUNT)
    assert "\n" not in str(refused.value) and "factory" in str(refused.value)


@pytest.mark.parametrize(
    "factory",
    ["Flat", "HNSW32", "HNSW", "HNSW16_SQ8", "HNSW8,PQ4", "NSG32", "IVF4,Flat", "IVF4_HNSW8,SQ8", "OPQ8_32,IVF4,PQ8",
     "PCA16,IVF4,SQfp16", "IVF4,PQ8,RFlat", "PQ8,Refine(SQ8)", "IVF4,PQ8x4fs", "RR64,Flat", "L2norm,Flat", "BFlat",
     "HNSW8,Refine(PCA16,Flat)", "BIVF4_HNSW8", "BHash2x8"],
)  # fmt: skip
def test_library_check_accepts(factory):
    assert check_factory(factory, DIM, count=COUNT) == factory


def test_without_dimension_only_the_string_is_checked():
    assert check_factory("IVF4,PQ7") == "IVF4,PQ7"  # 7 may divide the dimension: told once it is known
    with pytest.raises(EmbedkitError, match="HNSW's M"):
        check_factory("HNSW1", field="--factory")


NUMBER = st.one_of(st.integers(0, 5).map(str), st.sampled_from(["", "8", "16", "32", "64", "99999999999"]))
COMPONENT = st.one_of(
    st.builds("HNSW{}".format, NUMBER),
    st.builds("HNSW{}_{}".format, NUMBER, st.sampled_from(["Flat", "SQ8", "PQ4", "PQ0", "PQ4x0"])),
    st.builds("NSG{}".format, NUMBER),
    st.builds("PQ{}x{}".format, NUMBER, NUMBER),
    st.builds("PQ{}".format, NUMBER),
    st.builds("IVF{},Flat".format, NUMBER),
    st.builds("IVF{}_HNSW{},Flat".format, NUMBER, NUMBER),
    st.builds("IVF{}_NSG{},Flat".format, NUMBER, NUMBER),
    st.builds("IVF{},PQ{}".format, NUMBER, NUMBER),
    st.builds("OPQ{}_{},PQ{}".format, NUMBER, NUMBER, NUMBER),
    st.builds("PCA{},Flat".format, NUMBER),
    st.builds("RR{},Flat".format, NUMBER),
    st.builds("BHNSW{}".format, NUMBER),
    st.builds("BIVF{}".format, NUMBER),
    st.builds("BIVF{}_HNSW{}".format, NUMBER, NUMBER),
    st.builds("BHash{}x{}".format, NUMBER, NUMBER),
    st.builds("RQ{}x{}".format, NUMBER, NUMBER),
    st.builds("LSH{}".format, NUMBER),
    st.sampled_from(["Flat", "SQ8", "IDMap,Flat", "Flat,IDMap2", "SQ8,RFlat"]),
)
FACTORY = st.one_of(COMPONENT, st.builds("{},Refine({})".format, COMPONENT, COMPONENT))

# Build, train, fill and search an index of argv[1]; a RuntimeError is FAISS refusing cleanly, a crash is a failure.
TINY_BUILD = """
import sys, faiss, numpy as np
s, d, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
try:
    if s.startswith("B"):
        index, x = faiss.index_binary_factory(d, s), rng.integers(0, 256, (n, d // 8), dtype=np.uint8)
    else:
        index, x = faiss.index_factory(d, s, faiss.METRIC_L2), rng.standard_normal((n, d)).astype("float32")
    index.train(x)
    index.add(x)
    index.search(x[:3], 5)
except RuntimeError as err:
    print("refused by FAISS:", str(err).strip().splitlines()[-1])
"""


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(FACTORY)
@example("HNSW2,Refine(IVF1,Flat)")  # FAISS aborted on it: an inverted file cannot refine
def test_nothing_accepted_crashes_faiss(factory):
    try:
        check_factory(factory, DIM, metric="l2", count=COUNT)
    except EmbedkitError as refused:
        assert "\n" not in str(refused)
        return
    result = subprocess.run(
        [sys.executable, "-c", TINY_BUILD, factory, str(DIM), str(COUNT)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, (factory, result.returncode, result.stderr[-500:])
