"""Several batches at once on a CPU: one Python thread per stream, each running torch on its share of the threads.

With all of torch's intra-op threads on one forward pass, every operator ends at a barrier of all of them: small
operators (layer norms, additions, attention blocks, the short rows of queries) pay it hundreds of times per batch,
and when another process takes a core, the thread that waits for it stalls the others once per operator. Two
streams of one thread each on this project's 2-core CPU, 2,048-token batches, one process, alternating
(``benchmarks/RESULTS.md``): bf16 1.07-1.08x one stream on documents, 64-token documents and queries, fp32 1.04x;
with two busy processes on the machine 3.2x sentence-transformers bf16, where one stream (with a budget that grew
under load) was 1.15x. Every stream multiplies the same batches the same way, so the vectors are bit-identical to
one stream's on one thread (torch's fp32 products on 2 threads may sum in another order: 1e-6 on the AMX
CPU). Measured on 2 cores only: above ``MAX_STREAMS`` threads each stream gets several intra-op threads.

``torch.set_num_threads`` is process-wide for threads that start torch later: it is set per stream and put back when
the streams end, so only another thread that starts its first torch operator during an encode sees the change.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable
from typing import TypeVar

import torch

MAX_STREAMS = 4  # a guess beyond what was measured (2): every stream's Python takes the GIL between operators

Item = TypeVar("Item")


def stream_count(threads: int) -> int:
    """Streams for a process that runs ``threads`` torch threads: one per thread, at most ``MAX_STREAMS``."""
    return max(1, min(threads, MAX_STREAMS))


def run_streams(items: Iterable[Item], handle: Callable[[Item], None], streams: int) -> None:
    """Call ``handle`` on every item, ``streams`` at a time, each stream with ``threads // streams`` torch threads
    and inference mode on; the first error stops the others after their current item and is raised here.

    One stream, or a single item, runs here with all threads: a lone batch (a search's query) is not slowed."""
    items = iter(items)
    first = list(itertools.islice(items, 2))
    threads = torch.get_num_threads()
    streams = min(streams, threads)  # every stream needs a thread of its own
    if streams < 2 or len(first) < 2:
        with torch.inference_mode():
            for item in itertools.chain(first, items):
                handle(item)
        return
    pending = itertools.chain(first, items)
    done = object()
    lock, stop = threading.Lock(), threading.Event()
    errors: list[BaseException] = []

    def stream(share: int) -> None:
        torch.set_num_threads(share)
        try:
            with torch.inference_mode():
                while not stop.is_set():
                    with lock:  # the iterator (tokenization) is not thread-safe
                        item = next(pending, done)
                    if item is done:
                        return
                    handle(item)
        except BaseException as error:  # handed to the caller's thread below
            errors.append(error)
            stop.set()

    shares = [threads // streams + (rank < threads % streams) for rank in range(streams)]
    workers = [threading.Thread(target=stream, args=(share,), name="embedkit-stream") for share in shares]
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:  # also on Ctrl-C in this thread: the streams finish their batch and stop
        stop.set()
        for worker in workers:
            if worker.is_alive():
                worker.join()
        torch.set_num_threads(threads)
    if errors:
        raise errors[0]
