"""Encoding on a Ray cluster: Ray Data reads and tokenizes shards in CPU tasks, stateful actors encode and commit them.

One row of the Ray dataset is one shard file of the embeddings folder. A CPU task reads the shard's documents and
tokenizes them into the same length-sorted, token-budget batches a single process would make
(``models.batching.TextBatcher``, shipped without the weights); an actor class in ``map_batches`` (one model load
per actor, ``num_gpus`` when asked) runs the forward passes and commits the shard's two files atomically. The driver
(``encode_to_folder``) keeps the lock and the manifest, so the finished folder is the one a single process writes.

Ray restarts a killed actor and retries its task. A retried task first looks for the shard's committed ``.npy``
(``encode_to_folder`` removed every unlisted shard file before the run, so one that exists now was committed by
this run) and returns its entry instead of encoding it again: no shard is written twice.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.encode.shards import commit_shard, committed_shard, shard_rows
from embedkit.errors import EmbedkitError

if TYPE_CHECKING:
    from embedkit.models.embedding_model import EmbeddingModel

RAY_MISSING = "--executor ray needs Ray Data; install it with: pip install 'embedkit[ray]'"
# Scheduling weight of a read-and-tokenize task: small, so the actors never leave the tasks that feed them no CPU.
READ_TASK_CPUS = 0.25
RAY_LOG_VARIABLE = "RAY_BACKEND_LOG_LEVEL"
USAGE_STATS_VARIABLE = "RAY_USAGE_STATS_ENABLED"


@dataclass(frozen=True)
class RaySettings:
    """Where and how wide to encode; none of it changes a vector, so none of it is in the manifest."""

    address: str | None = None  # None: a local cluster of this machine; "auto" or "ray://host:10001": a running one
    num_workers: int = 1  # encoding actors, one model load each
    gpus_per_worker: float = 0.0
    cpus_per_worker: float | None = None  # default: the cluster's CPUs less the read tasks' share, split evenly

    def check(self) -> RaySettings:
        if self.num_workers < 1:
            raise EmbedkitError(f"must be at least 1, not {self.num_workers}", field="--num-workers")
        if self.gpus_per_worker < 0:
            raise EmbedkitError(f"must be at least 0, not {self.gpus_per_worker}", field="--gpus-per-worker")
        if self.cpus_per_worker is not None and self.cpus_per_worker <= 0:
            raise EmbedkitError(f"must be more than 0, not {self.cpus_per_worker}", field="--cpus-per-worker")
        return self


def import_ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError:
        raise EmbedkitError(RAY_MISSING, field="--executor") from None
    return ray


def _read_and_tokenize(row: dict[str, Any], corpus: Any, batcher: Any, prompt: str) -> dict[str, Any]:
    """One shard's ids and its batches of features, or its texts for a model without a batcher (a sparse or
    multi-vector one encodes through its library's own route); pickled: a column of bytes crosses Arrow unchanged."""
    import ray

    documents = ray.get(corpus)
    ids, texts = shard_rows(documents, int(row["start"]), int(row["stop"]))
    work = texts if batcher is None else list(batcher.batches(texts, prompt))
    return {"index": row["index"], "payload": pickle.dumps((ids, work))}


class ShardEncoder:
    """A Ray actor: loads the model once from its recorded settings, then encodes and commits shard after shard."""

    def __init__(self, settings: dict[str, Any], runtime: dict[str, Any], folder: str, threads: int) -> None:
        import torch

        from embedkit.models.loading import load_model_from_settings

        torch.set_num_threads(threads)
        self.model = load_model_from_settings(settings, **runtime)
        if self.model.settings != settings:  # e.g. another model at the same path on this node
            raise EmbedkitError(f"the model loaded on this Ray node differs from the driver's: {settings['model']}")
        self.model.st.eval()
        self.folder = Path(folder)

    def __call__(self, batch: Any) -> Any:
        """``map_batches`` hands one row (``batch_size=1``: a shard is the unit of work and of retry)."""
        import pandas as pd

        return pd.DataFrame([self.encode_shard(row) for row in batch.to_dict("records")])

    def encode_shard(self, row: dict[str, Any]) -> dict[str, Any]:
        import torch

        from embedkit.models.batching import embed_features

        ids, work = pickle.loads(row["payload"])
        index = int(row["index"])
        entry = committed_shard(self.folder, index, len(ids))
        if entry is None and not _dense(self.model):
            entry = commit_shard(self.folder, index, ids, self.model.encode_documents(work))
        elif entry is None:
            vectors = np.empty((len(ids), self.model.dim), dtype=np.float32)
            with torch.inference_mode():
                for batch, features in work:
                    vectors[batch] = embed_features(self.model, features)
            entry = commit_shard(self.folder, index, ids, vectors)
        return {"entry": json.dumps(entry)}


def _dense(model: Any) -> bool:
    """A single-vector model, encoded from batches tokenized in the read tasks (a sparse or multi-vector model is
    handed its texts)."""
    return model.encodes_token_batches


class RayExecutor:
    """``encode_to_folder``'s executor for a Ray cluster (local by default)."""

    def __init__(self, settings: RaySettings) -> None:
        self.settings = settings.check()

    def _start(self, ray: Any) -> Callable[[], None] | None:
        """Connect to (or start) the cluster; when this call started it, the function that shuts it down.

        The settings made here last only while the encode runs: the log level and usage statistics variables
        (usage reports off unless the user's environment turns them on) are read by ``ray.init`` and the processes
        it starts, so they are put back as soon as it returns; the ``ray.data`` logger's level, the data context's
        flags, the SIGTERM handler and the variables ``ray.init`` itself sets in this process (``PYTHONBREAKPOINT``,
        ``RAY_USAGE_STATS_ENABLED``) are put back by the returned function, after the shutdown.
        """
        if ray.is_initialized():
            return None
        local = self.settings.address is None
        before = dict(os.environ)
        terminate = signal.getsignal(signal.SIGTERM)  # ray.init puts its own handler in the driver
        os.environ.setdefault(RAY_LOG_VARIABLE, "error")  # keep the C++ workers' warnings off the terminal
        os.environ.setdefault(USAGE_STATS_VARIABLE, "0")  # Ray reports usage only where the user turned it on
        try:
            ray.init(
                address=self.settings.address,
                num_cpus=os.cpu_count() if local else None,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
        finally:
            for name in (RAY_LOG_VARIABLE, USAGE_STATS_VARIABLE):
                if name not in before:
                    os.environ.pop(name, None)
        set_by_ray = {name: value for name, value in os.environ.items() if before.get(name) != value}
        logger = logging.getLogger("ray.data")
        level = logger.level
        logger.setLevel(logging.WARNING)  # its per-dataset INFO lines are noise on a terminal
        context = ray.data.DataContext.get_current()
        flags = {"enable_progress_bars": False, "print_on_execution_start": False}
        saved = {name: getattr(context, name) for name in flags}
        for name, value in flags.items():
            setattr(context, name, value)

        def stop() -> None:
            try:
                ray.shutdown()
            finally:
                if threading.current_thread() is threading.main_thread():  # where ray.init could set it
                    signal.signal(signal.SIGTERM, terminate)
                logger.setLevel(level)
                for name, value in saved.items():
                    setattr(context, name, value)
                for name, value in set_by_ray.items():
                    if os.environ.get(name) != value:  # changed again since: no longer Ray's to undo
                        continue
                    if name in before:
                        os.environ[name] = before[name]
                    else:
                        del os.environ[name]

        return stop

    def _actor_resources(self, ray: Any) -> tuple[float, int]:
        """CPUs each actor reserves, and its torch threads."""
        cpus = self.settings.cpus_per_worker
        if cpus is None:
            total = float(ray.cluster_resources().get("CPU", 1.0))
            cpus = max(0.1, (total - READ_TASK_CPUS) / self.settings.num_workers)
        return cpus, max(1, round(cpus))

    def encode_shards(
        self,
        model: EmbeddingModel,
        corpus: Any,
        folder: Path,
        pending: list[int],
        shard_size: int,
        progress: Any,
    ) -> Iterator[dict[str, Any]]:
        if getattr(model, "chunking", None) is not None:
            raise EmbedkitError(
                "--executor ray does not chunk documents; encode chunks here or with --worker-id/--num-workers",
                field="--chunking",
            )
        if not pending:
            return
        ray = import_ray()
        from embedkit.models.batching import TextBatcher

        stop = self._start(ray)
        try:
            cpus, threads = self._actor_resources(ray)
            runtime = {"dtype": model.dtype, "device": "cuda" if self.settings.gpus_per_worker > 0 else model.device}
            if _dense(model):
                runtime |= {"batch_tokens": model.batch_tokens, "backend": model.backend}
            shards = [
                {"index": index, "start": index * shard_size, "stop": min(len(corpus), (index + 1) * shard_size)}
                for index in pending
            ]
            dataset = ray.data.from_items(shards, override_num_blocks=len(shards)).map(
                _read_and_tokenize,
                fn_kwargs={
                    "corpus": ray.put(corpus),
                    "batcher": TextBatcher.of(model) if _dense(model) else None,
                    "prompt": model.document_prompt,
                },
                num_cpus=READ_TASK_CPUS,
            )
            encoded = dataset.map_batches(
                ShardEncoder,
                fn_constructor_kwargs={
                    "settings": model.settings,
                    "runtime": runtime,
                    "folder": str(Path(folder).resolve()),
                    "threads": threads,
                },
                batch_size=1,
                batch_format="pandas",
                compute=ray.data.ActorPoolStrategy(size=self.settings.num_workers),
                num_cpus=cpus,
                num_gpus=self.settings.gpus_per_worker or None,
            )
            for row in encoded.iter_rows():
                entry = json.loads(row["entry"])
                progress.update(entry.get("documents", entry["count"]))
                yield entry
        except ray.exceptions.RayError as err:
            cause = getattr(err, "cause", None)
            if isinstance(cause, EmbedkitError):
                raise cause from None
            raise EmbedkitError(f"the Ray executor failed: {str(err).strip().splitlines()[-1]}") from None
        finally:
            if stop is not None:
                stop()
