"""``output_lock`` excludes threads of one process too: two threads writing one output end with one valid output."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from embedkit.outputs import output_lock

pytestmark = pytest.mark.two_threads  # run in make test's second pass, with torch's two threads


def _in_threads(count: int, work) -> list:
    """Run ``work(i)`` in ``count`` threads released together; their results, or the first exception raised."""
    start = threading.Barrier(count)
    results: list = [None] * count
    errors: list[BaseException] = []

    def run(i: int) -> None:
        start.wait()
        try:
            results[i] = work(i)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not any(thread.is_alive() for thread in threads), "a thread never finished"
    if errors:
        raise errors[0]
    return results


def test_threads_never_hold_one_lock_at_once(tmp_path):
    """Four threads take one lock 25 times each (the lock file unlinked and made again each time): never two inside,
    re-entrant within a thread, and the lock file goes with the last holder."""
    inside: list[int] = []
    overlaps: list[int] = []
    target = tmp_path / "out"

    def work(i: int) -> None:
        for _ in range(25):
            with output_lock(target):
                inside.append(i)
                if len(inside) > 1:
                    overlaps.append(i)
                with output_lock(target):  # the holder takes it again without waiting for itself
                    time.sleep(0.001)
                inside.remove(i)

    _in_threads(4, work)
    assert overlaps == []
    assert list(tmp_path.iterdir()) == []


def test_two_threads_encode_into_one_folder(tmp_path, default_model, scifact):
    """The second thread waits for the first, then finds the folder done and encodes nothing."""
    from embedkit import EmbeddingsFolder, encode_to_folder
    from embedkit.data import doc_text
    from embedkit.encode.executor import InProcess

    meet = threading.Barrier(2, timeout=2.0)

    class Meeting(InProcess):
        """Encodes as ``InProcess`` after waiting (2 s at most) for the other thread to start encoding too: under a
        lock that excludes threads it cannot, so the wait times out; without one, both always encode at once."""

        def encode_shards(self, model, corpus, folder, pending, shard_size, progress):
            if pending:
                with contextlib.suppress(threading.BrokenBarrierError):  # alone: the other thread waits outside
                    meet.wait()
            yield from super().encode_shards(model, corpus, folder, pending, shard_size, progress)

    corpus = scifact.corpus.select(range(20))
    folder = tmp_path / "emb"
    results = _in_threads(
        2, lambda i: encode_to_folder(default_model, corpus, folder, shard_size=5, executor=Meeting())
    )
    assert sorted(result.encoded_shards for result in results) == [0, 4]  # one encoded it all, the other reused it
    opened = EmbeddingsFolder.open(folder)
    assert opened.complete and opened.ids() == [str(row["_id"]) for row in corpus]
    vectors = opened.embeddings()
    expected = default_model.encode([doc_text(row) for row in corpus.select(range(3))])
    assert vectors.shape == (20, default_model.dim)
    assert (vectors[:3] * expected).sum(axis=1).min() > 0.9999
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []  # no temporary, no lock


def test_two_threads_build_one_cached_export(tmp_path, tiny_bert):
    """One thread exports, the other waits and takes its model: one build, one valid folder, nothing left over."""
    pytest.importorskip("onnxruntime")
    import onnxruntime
    import torch

    from embedkit import load_model
    from embedkit.models.onnx import cached_export, export_onnx, export_sample, network_source

    st = load_model(tiny_bert, pooling="mean", device="cpu").st
    network = st[0].model
    sample, names = export_sample(st)
    builds: list[int] = []

    def build(tmp: Path) -> None:
        builds.append(threading.get_ident())
        export_onnx(network, sample, names, tmp)

    folder = tmp_path / "onnx" / "tiny-fp32"
    paths = _in_threads(2, lambda i: cached_export(folder, build, network_source(network)))
    assert len(builds) == 1 and paths == [folder / "model.onnx"] * 2
    assert sorted(p.name for p in (tmp_path / "onnx").iterdir()) == ["tiny-fp32"]
    session = onnxruntime.InferenceSession(str(paths[0]), providers=["CPUExecutionProvider"])
    (hidden,) = session.run(["last_hidden_state"], {name: sample[name].numpy() for name in names})
    with torch.no_grad():
        expected = network(**{name: sample[name] for name in names}).last_hidden_state.numpy()
    assert np.allclose(hidden, expected, atol=1e-4)
