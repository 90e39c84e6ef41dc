"""``MicroBatcher``: concurrent requests share one encode + search, run in one worker thread.

A model encodes 32 queries in little more time than one, so under load the server gathers the requests that
arrive within a few milliseconds (or until ``max_batch`` queries) and hands them to the worker together. While the
worker runs, new requests queue up and form the next batch, so a busy server batches more without waiting more.
The worker is one thread: torch and FAISS use their own threads inside a call, and one caller at a time keeps
their results independent of how requests happened to be grouped.

One request must not fail its neighbours: when a batch raises, its requests are run again one by one, and a request
that still fails alone is searched for the first text that fails alone, so the client is told which of its inputs
to fix (``WorkFailed``) while every other request of the batch gets its answer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from embedkit.validation import check_number

# (texts, k): k is None for an embeddings request
Work = tuple[list[str], "int | None"]


@dataclass
class BatchStats:
    """What the batcher has done: /health shows it, so batching under load can be seen from outside."""

    batches: int = 0
    requests: int = 0
    queries: int = 0
    largest_batch_requests: int = 0
    largest_batch_queries: int = 0
    multi_request_batches: int = 0  # batches that held more than one request
    isolated_batches: int = 0  # batches that raised and were run again request by request
    failed_requests: int = 0  # requests that failed when run alone

    def add(self, jobs: Sequence[_Job]) -> None:
        self.batches += 1
        self.requests += len(jobs)
        size = sum(len(job.texts) for job in jobs)
        self.queries += size
        self.largest_batch_requests = max(self.largest_batch_requests, len(jobs))
        self.largest_batch_queries = max(self.largest_batch_queries, size)
        self.multi_request_batches += len(jobs) > 1

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class WorkFailed(Exception):
    """One request's work failed when run alone: ``error`` is what ``process`` raised, ``position`` the index of
    the request's first text that also fails alone (``None`` when each text passes alone)."""

    def __init__(self, error: Exception, position: int | None) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error, self.position = error, position


@dataclass
class _Job:
    texts: list[str]
    k: int | None
    future: asyncio.Future


class MicroBatcher:
    """Groups submitted work into batches for ``process`` (a list of ``(texts, k)`` in, one result each out)."""

    def __init__(self, process: Callable[[list[Work]], list[Any]], max_batch: int, max_wait_ms: float) -> None:
        self.process = process
        self.max_batch = check_number(max_batch, "max_batch", minimum=1)
        self.max_wait = check_number(max_wait_ms, "max_wait_ms", minimum=0, maximum=60_000) / 1000  # NaN: no batch ends
        self.stats = BatchStats()
        self._queue: asyncio.Queue[_Job] | None = None
        self._arrived: asyncio.Event | None = None
        self._held: _Job | None = None  # a request that did not fit the last batch opens the next
        self._task: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None

    async def start(self) -> None:
        self._queue, self._arrived = asyncio.Queue(), asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedkit-batch")
        self._task = asyncio.create_task(self._run(), name="embedkit-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    async def submit(self, texts: list[str], k: int | None) -> Any:
        """The result of ``process`` for this one piece of work, computed in some batch."""
        if self._queue is None or self._arrived is None:
            raise RuntimeError("the batcher is not started")
        job = _Job(texts, k, asyncio.get_running_loop().create_future())
        self._queue.put_nowait(job)
        self._arrived.set()
        return await job.future

    async def _next_batch(self) -> list[_Job]:
        assert self._queue is not None and self._arrived is not None
        first, self._held = self._held or await self._queue.get(), None
        jobs, size = [first], len(first.texts)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait
        while size < self.max_batch:
            self._arrived.clear()
            while size < self.max_batch and not self._queue.empty():
                job = self._queue.get_nowait()
                if size + len(job.texts) > self.max_batch:
                    self._held = job
                    return jobs
                jobs.append(job)
                size += len(job.texts)
            remaining = deadline - loop.time()
            if size >= self.max_batch or remaining <= 0:
                break
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), remaining)
        return jobs

    async def _run(self) -> None:
        while True:
            jobs = [job for job in await self._next_batch() if not job.future.done()]  # a client may have left
            if not jobs:
                continue
            self.stats.add(jobs)
            await self._answer(jobs)

    async def _call(self, work: list[Work]) -> list[Any]:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.process, work)

    async def _answer(self, jobs: list[_Job]) -> None:
        """Run ``jobs`` together; if that raises, each alone, so only the request at fault gets the error."""
        try:
            results = await self._call([(job.texts, job.k) for job in jobs])
        except Exception as err:
            if len(jobs) > 1:
                self.stats.isolated_batches += 1
                for job in jobs:
                    if not job.future.done():
                        await self._answer([job])
                return
            self.stats.failed_requests += 1
            failed = WorkFailed(err, await self._culprit(jobs[0]))
            if not jobs[0].future.done():
                jobs[0].future.set_exception(failed)
            return
        for job, result in zip(jobs, results):
            if not job.future.done():
                job.future.set_result(result)

    async def _culprit(self, job: _Job) -> int | None:
        """The first of the job's texts that fails alone (at most one call per text, only on the failure path)."""
        if len(job.texts) == 1:
            return 0
        for position, text in enumerate(job.texts):
            try:
                await self._call([([text], job.k)])
            except Exception:
                return position
        return None
