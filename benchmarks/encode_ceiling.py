"""How far the default bf16 encode could go: its bare OpenVINO forward against its whole encode and the peer.

    python benchmarks/encode_ceiling.py                               # 1,000 documents, 5 rounds
    python benchmarks/encode_ceiling.py --max-tokens 64               # documents cut to 64 word pieces
    python benchmarks/encode_ceiling.py --texts train-queries --docs all

Three contenders, loaded in one process and timed in alternating rounds (medians):

- ``sentence-transformers-bf16``: its own ``encode`` under bf16 autocast, at its best batch size (a sweep over
  ``--st-batch-sizes`` on the timed texts first, as ``encode.py`` does);
- ``openvino-bf16``: ``load_model(dtype="bfloat16").encode``, all of it (tokenizing, batching, the forward on two
  streams, pooling, normalising);
- ``forward-only``: the same model's own compiled OpenVINO network run over the very batches that encode makes
  (tokenized once, before the rounds), one async request per OpenVINO stream, outputs left in place. No tokenizing,
  no Python between batches, no pooling: what no glue code around these kernels can beat.

So ``forward-only`` against the peer bounds what any rework of embedkit's own code could reach with these kernels,
and ``openvino-bf16`` against ``forward-only`` is what that code costs. ``RESULTS.md`` (2026-12-05) has the numbers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from encode import StEncoder, sweep_batch_sizes
from encode_conditions import TEXT_KINDS, benchmark_texts

from embedkit import load_model
from embedkit.errors import EmbedkitError
from embedkit.models import heap
from embedkit.models.batching import TextBatcher

if TYPE_CHECKING:
    from embedkit.models.embedding_model import EmbeddingModel


def forward_only(model: EmbeddingModel, texts: list[str]) -> Callable[[list[str]], None]:
    """A callable that runs ``model``'s compiled network over ``texts``' encode batches, nothing else."""
    import openvino

    network = model.st[0].auto_model
    feeds = [
        {name: features[name].numpy().astype("int64") for name in network.input_names}
        for _, features in TextBatcher.of(model, weightless=False).batches(texts, "")
    ]
    requests = network.compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")
    queue = openvino.AsyncInferQueue(network.compiled, max(1, requests))

    def run(_: list[str]) -> None:
        for feed in feeds:
            queue.start_async(feed)
        queue.wait_all()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", choices=TEXT_KINDS, default="docs")
    parser.add_argument("--docs", default="1000", help="texts timed: a number or 'all'")
    parser.add_argument("--max-tokens", type=int, help="cut every timed text to this many word pieces")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--st-batch-sizes", default="16,32,64,128")
    parser.add_argument("--st-sweep-docs", type=int, default=200, help="texts the batch-size sweep encodes")
    args = parser.parse_args()
    if args.docs != "all" and not args.docs.isdigit():
        parser.error("--docs takes a number or 'all'")
    sizes = [int(size) for size in args.st_batch_sizes.split(",") if size.strip().isdigit() and int(size) > 0]
    if not sizes or len(sizes) != len(args.st_batch_sizes.split(",")):
        parser.error("--st-batch-sizes takes comma-separated positive numbers")
    heap.steady()  # process-wide, as embedkit's encode sets it: every contender runs under it (encode.py)
    texts = benchmark_texts("scifact", args.texts, args.docs, args.max_tokens)
    peer = StEncoder("bfloat16", 32)
    rates = sweep_batch_sizes(peer, texts[: args.st_sweep_docs], sizes)
    print(f"sentence-transformers-bf16 sweep: {rates} docs/s -> batch {peer.batch_size}")
    try:
        model = load_model(backend="openvino", dtype="bfloat16", device="cpu")
    except EmbedkitError as error:  # no OpenVINO, or no bf16 kernels in it on this CPU
        parser.error(f"the openvino backend does not load here: {error}")
    contenders = {
        "sentence-transformers-bf16": peer,
        "openvino-bf16": lambda batch: model.encode(batch, show_progress=False),
        "forward-only": forward_only(model, texts),
    }
    for run in contenders.values():  # one untimed call each (forward-only always runs all of its batches)
        run(texts[:64])
    timings: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for round_number in range(args.rounds):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            contenders[name](texts)
            timings[name].append(len(texts) / (time.perf_counter() - start))
        print(f"round {round_number + 1}: " + ", ".join(f"{n} {timings[n][-1]:.1f}" for n in names))
    medians = {name: statistics.median(values) for name, values in timings.items()}
    peer_rate = medians["sentence-transformers-bf16"]
    cut = f", cut to {args.max_tokens} word pieces" if args.max_tokens else ""
    print(f"\n{len(texts)} {args.texts}{cut}, {args.rounds} rounds, medians")
    print("| contender | texts/s | x peer | spread |\n|---|---:|---:|---:|")
    for name, rate in medians.items():
        spread = (max(timings[name]) - min(timings[name])) / rate
        print(f"| {name} | {rate:.1f} | {rate / peer_rate:.2f} | {spread:.0%} |")
    print(f"glue cost: the whole encode is {medians['openvino-bf16'] / medians['forward-only']:.2f}x its forward")


if __name__ == "__main__":
    main()
