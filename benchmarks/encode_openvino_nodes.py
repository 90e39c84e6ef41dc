"""Where the openvino backend's forward spends its time: OpenVINO's own per-node counters for one batch shape.

    python benchmarks/encode_openvino_nodes.py                      # 8x256 tokens on one thread
    python benchmarks/encode_openvino_nodes.py --batch 31 --length 66
    python benchmarks/encode_openvino_nodes.py --no-attention-fusion   # OpenVINO's MHA fusion off, for comparison

The network is the one ``load_model(backend="openvino", dtype="bfloat16")`` exports and caches. It is compiled here
again with ``PERF_COUNT`` on, one stream of ``--threads`` threads, as one encode stream runs it. One untimed warm-up,
then ``--repeats`` inferences of random ids. Printed: ms per batch, docs/s, and per node type (with OpenVINO's
kernel name) the milliseconds of the last inference and their share. ``encode_profile.py`` sets whole encodes
against the matmul peak; this shows which nodes the rest of the time is in (``RESULTS.md``, 2026-12-05).
"""

from __future__ import annotations

import argparse
import collections
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import openvino

from embedkit import load_model
from embedkit.errors import EmbedkitError
from embedkit.models.openvino_backend import PRECISIONS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--dtype", choices=sorted(PRECISIONS), default="bfloat16")
    parser.add_argument("--no-attention-fusion", action="store_true", help="SNIPPETS_MODE DISABLE")
    args = parser.parse_args()

    try:
        network = load_model(backend="openvino", dtype=args.dtype, device="cpu").st[0].auto_model
    except EmbedkitError as error:  # no OpenVINO, or no bf16 kernels in it on this CPU
        parser.error(f"the openvino backend does not load here: {error}")
    core = openvino.Core()
    config = {
        "INFERENCE_PRECISION_HINT": PRECISIONS[args.dtype],
        "PERFORMANCE_HINT": "LATENCY",
        "NUM_STREAMS": 1,
        "INFERENCE_NUM_THREADS": args.threads,
        "PERF_COUNT": True,
    }
    if args.no_attention_fusion:
        config["SNIPPETS_MODE"] = "DISABLE"
    compiled = core.compile_model(core.read_model(str(network.path)), "CPU", config)
    request = compiled.create_infer_request()
    shape = (args.batch, args.length)
    feeds = {name: np.ones(shape, dtype="int64") for name in network.input_names}
    feeds["input_ids"] = np.random.default_rng(0).integers(1000, 20000, shape)
    if "token_type_ids" in feeds:
        feeds["token_type_ids"][:] = 0
    request.infer(feeds)
    start = time.perf_counter()
    for _ in range(args.repeats):
        request.infer(feeds)
    seconds = (time.perf_counter() - start) / args.repeats
    print(
        f"{args.batch}x{args.length}, {args.threads} thread(s): {seconds * 1000:.1f} ms per batch, "
        f"{args.batch / seconds:.1f} docs/s, OpenVINO {openvino.get_version()}"
    )
    times: collections.Counter[str] = collections.Counter()
    counts: collections.Counter[str] = collections.Counter()
    for node in request.profiling_info:
        if node.status.name == "EXECUTED":
            key = f"{node.node_type} ({node.exec_type})"
            times[key] += node.real_time.total_seconds() * 1000
            counts[key] += 1
    total = sum(times.values())
    print("| node (kernel) | nodes | ms | share |\n|---|---:|---:|---:|")
    for key, ms in times.most_common():
        if ms >= 0.005 * total:
            print(f"| {key} | {counts[key]} | {ms:.2f} | {100 * ms / total:.1f} % |")


if __name__ == "__main__":
    main()
