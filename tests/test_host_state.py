"""The library never changes its host process, during a call as well as after it: a second thread samples the
process's state (stdout's and stderr's descriptors, the environment, loggers, warning filters, signal handlers,
the libraries' progress bars and verbosity, torch's threads) throughout each public call of the default dense path,
the on-disk index and the living index, and finds it as it was.

Each call runs once before it is watched, so what a first import sets up for good is not counted; the second run is
watched (and compared after it returns). Ray is not covered here yet: its executor lowers Ray's log level while it
runs."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from embedkit import Index, LiveIndex, encode_to_folder, evaluate, load_dataset, load_model
from embedkit.index.faiss_helpers import BuildSettings
from embedkit.index.ondisk import build_ondisk


def snapshot() -> dict[str, object]:
    """What a call must leave as it found it (read from any thread)."""
    import datasets
    import torch
    from transformers.utils import logging as transformers_logging

    loggers = dict(logging.Logger.manager.loggerDict)
    return {
        "stdout": os.readlink("/proc/self/fd/1"),
        "stderr": os.readlink("/proc/self/fd/2"),
        "environ": dict(os.environ),
        "root logger": (logging.root.level, tuple(logging.root.handlers)),
        "loggers": {
            name: (logger.level, tuple(logger.handlers), logger.disabled, logger.propagate)
            for name, logger in loggers.items()
            if isinstance(logger, logging.Logger)
        },
        "warning filters": tuple(warnings.filters),
        "signals": {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)},
        "datasets progress bars": datasets.is_progress_bar_enabled(),
        "transformers verbosity": transformers_logging.get_verbosity(),
        "torch threads": torch.get_num_threads(),
    }


def changed(before: dict, now: dict) -> set[str]:
    """The names of what differs; loggers made meanwhile (a module imported) are new, not changed."""
    names = {name for name in before if name != "loggers" and before[name] != now[name]}
    if any(now["loggers"].get(name) != state for name, state in before["loggers"].items()):
        names.add("loggers")
    return names


def changes_during(call: Callable[[], object]) -> set[str]:
    """What differed from the state before ``call`` at any sample taken while it ran, or after it returned."""
    call()  # first use: imports and caches
    before = snapshot()
    seen: set[str] = set()
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            try:
                seen.update(changed(before, snapshot()))
            except RuntimeError:  # a dict changed size while it was read: it was being changed
                seen.add("a registry being changed")
            stop.wait(0.001)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        call()
    finally:
        stop.set()
        sampler.join()
    return seen | changed(before, snapshot())


@pytest.fixture(scope="module")
def world(scifact_subset, default_model, tmp_path_factory):
    root = tmp_path_factory.mktemp("host-state")
    encode_to_folder(default_model, load_dataset(scifact_subset).corpus, root / "emb")
    return {"root": root, "emb": root / "emb", "data": scifact_subset}


def _copy(data: Path, root: Path) -> Path:
    """The dataset at a new path, so reading it writes a new cache entry (the path is in the cache key)."""
    target = root / f"data-{len(list(root.glob('data-*')))}"
    shutil.copytree(data, target)
    return target


def test_the_default_dense_path_leaves_the_process_alone(world, default_model):
    root, data = world["root"], world["data"]
    queries = list(load_dataset(data).split_queries("test").values())

    def dense_path() -> None:
        dataset = load_dataset(_copy(data, root))
        vectors = default_model.encode_documents([doc["text"] for doc in dataset.corpus.select(range(20))])
        index = Index.build(np.asarray(vectors), [str(i) for i in range(20)], "Flat", use_gpu=False)
        index.search(np.asarray(default_model.encode_queries(queries[:5])), 3)
        folder = root / f"idx-{len(list(root.glob('idx-*')))}"
        index.save(folder)
        Index.load(folder)
        evaluate(default_model, dataset, "test", cache_dir=root / "cache")

    assert changes_during(dense_path) == set()
    assert changes_during(lambda: load_model(device="cpu")) == set()


def test_the_on_disk_index_leaves_the_process_alone(world, default_model):
    root = world["root"]
    queries = np.asarray(default_model.encode_queries(["aspirin", "statins"]))

    def on_disk() -> None:
        folder = root / f"disk-{len(list(root.glob('disk-*')))}"
        settings = BuildSettings("IVF4,Flat", train_size=150, seed=0, use_gpu=False, nprobe=2)
        build_ondisk(world["emb"], folder, settings)
        os.rename(folder, folder.with_name(folder.name + "-moved"))
        Index.load(folder.with_name(folder.name + "-moved")).search(queries, 5)

    assert changes_during(on_disk) == set()


def test_the_living_index_leaves_the_process_alone(world, default_model):
    root = world["root"]
    vectors = np.asarray(default_model.encode_documents([f"document number {i}" for i in range(8)]))

    def living() -> None:
        folder = root / f"live-{len(list(root.glob('live-*')))}"
        Index.build(vectors[:4], [f"d{i}" for i in range(4)], "Flat", use_gpu=False).save(folder)
        live = LiveIndex.open(folder, fields={"year": "int"})
        live.add([f"d{i}" for i in range(4, 8)], vectors[4:], metadata=[{"year": 2000 + i} for i in range(4)])
        live.delete(["d0", "d5"])
        live.search(vectors[:2], 3, filter="year >= 2001")
        live.compact()
        live.save(root / f"{folder.name}-saved")

    assert changes_during(living) == set()


def test_pyserini_bm25_leaves_the_process_alone(world):
    pytest.importorskip("pyserini", reason="the pyserini extra is not installed")
    from embedkit.search import BM25

    root, data = world["root"], world["data"]
    bm25 = BM25(backend="pyserini")
    assert changes_during(lambda: evaluate(None, load_dataset(_copy(data, root)), "test", bm25)) == set()
