"""Encode streams (``models/cpu_streams.py``): batches on one Python thread per torch thread give one stream's
vectors bit for bit at the same threads per batch, errors reach the caller, and torch's thread count is put back."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from embedkit import load_model
from embedkit.data import doc_text
from embedkit.models import batching
from embedkit.models.cpu_streams import run_streams


@pytest.fixture
def two_threads():
    """The suite runs one torch thread per process; streams need two."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_two_streams_give_one_streams_vectors(two_threads, scifact, monkeypatch, dtype):
    """The same batches on two threads of one torch thread each equal one stream of one thread bit for bit, and one
    stream on both threads to 1e-6, in both precisions (bf16: the packed path, whose query/key/value slices are kept
    per thread)."""
    model = load_model(dtype=dtype, device="cpu", batch_tokens=1024, backend="torch")
    texts = [doc_text(scifact.corpus[i]) for i in range(0, 5183, 104)]  # 50 documents: about 12 batches
    seen: list[tuple[str, int, int]] = []
    embed = batching.embed_features

    def recording(model, features):
        seen.append((threading.current_thread().name, threading.get_ident(), torch.get_num_threads()))
        return embed(model, features)

    monkeypatch.setattr(batching, "embed_features", recording)
    streamed = model.encode(texts)
    assert {name for name, _, _ in seen} == {"embedkit-stream"} and len(seen) > 6
    assert len({ident for _, ident, _ in seen}) == 2  # both streams took batches
    assert {threads for _, _, threads in seen} == {1}
    assert torch.get_num_threads() == 2
    seen.clear()
    monkeypatch.setattr(batching, "stream_count", lambda threads: 1)
    alone = model.encode(texts)
    assert {ident for _, ident, _ in seen} == {threading.get_ident()}
    assert {threads for _, _, threads in seen} == {2}
    # torch's fp32 products on the AMX CPU sum in another order on 2 threads than on 1: close, not always equal
    assert np.allclose(streamed, alone, rtol=0, atol=1e-6)
    torch.set_num_threads(1)  # one stream on one thread: each batch multiplied exactly as a stream did
    assert np.array_equal(streamed, model.encode(texts))


def test_a_lone_batch_runs_on_the_calling_thread_with_every_thread(two_threads):
    calls: list[tuple[threading.Thread, int]] = []
    run_streams(["one"], lambda item: calls.append((threading.current_thread(), torch.get_num_threads())), streams=2)
    assert calls == [(threading.current_thread(), 2)]


def test_more_streams_than_threads_run_one_per_thread(two_threads):
    threads: set[int] = set()

    def handle(item: int) -> None:
        time.sleep(0.01)
        threads.add(threading.get_ident())

    run_streams(range(20), handle, streams=8)
    assert len(threads) == 2 and torch.get_num_threads() == 2


def test_an_error_in_one_stream_stops_the_others_and_reaches_the_caller(two_threads):
    done: list[int] = []

    def handle(item: int) -> None:
        if item == 5:
            raise ValueError("batch 5 is bad")
        time.sleep(0.01)
        done.append(item)

    with pytest.raises(ValueError, match="batch 5 is bad"):
        run_streams(range(200), handle, streams=2)
    assert 4 <= len(done) < 20  # the other stream finished its batch in hand and took no more
    assert torch.get_num_threads() == 2
    assert not [t for t in threading.enumerate() if t.name == "embedkit-stream"]
