"""Sparse shards, fed generated rows and damaged files: a shard written by ``commit_shard`` reads back exactly, and
any truncation of its file or a wrong dimension is one ``EmbedkitError``, never another exception or wrong rows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from embedkit.encode.folder import load_sparse_rows
from embedkit.encode.shards import commit_shard
from embedkit.errors import EmbedkitError
from embedkit.sparse import SparseRows

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
DIM = 50


@st.composite
def sparse_rows(draw) -> tuple[SparseRows, np.ndarray]:
    """Rows drawn as a dense matrix (the independent truth) with most weights zero."""
    count = draw(st.integers(0, 6))
    weights = st.one_of(*[st.just(0.0)] * 6, st.floats(-5, 5, allow_nan=False, width=32))
    dense = np.array(draw(st.lists(st.lists(weights, min_size=DIM, max_size=DIM), min_size=count, max_size=count)))
    dense = dense.reshape(count, DIM).astype(np.float32)
    import torch

    return SparseRows.from_torch(torch.from_numpy(dense).to_sparse()), dense


@SETTINGS
@given(drawn=sparse_rows(), cut=st.floats(0, 1))
def test_a_sparse_shard_reads_back_exactly_or_fails_in_one_line(drawn, cut, tmp_path_factory):
    rows, dense = drawn
    folder = tmp_path_factory.mktemp("shard")
    entry = commit_shard(folder, 0, [f"d{i}" for i in range(len(rows))], rows)
    path = folder / entry["embeddings"]
    back = load_sparse_rows(path, DIM)
    assert np.array_equal(back.to_scipy().toarray(), dense) and entry["nnz"]["rows"] == len(rows)
    assert np.all(np.diff(back.indptr) >= 0) and len(back.indices) == int(np.count_nonzero(dense))
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * cut)])
    try:
        damaged = load_sparse_rows(path, DIM)
    except EmbedkitError as err:
        assert "not a readable sparse shard" in str(err)
    else:  # a cut at the very end leaves the file whole
        assert np.array_equal(damaged.to_scipy().toarray(), dense)


def test_arrays_that_disagree_are_refused():
    with pytest.raises(ValueError, match="disagree"):
        SparseRows(np.array([0, 2]), np.array([1], np.int32), np.array([1.0], np.float32), DIM)
