"""Where an encode's time goes, and how far each path is from this CPU's own matmul peak.

    python benchmarks/encode_profile.py                      # 1,000 SciFact documents, fp32 and bf16
    python benchmarks/encode_profile.py --docs 200 --output runs/encode-profile.json
    python benchmarks/encode_profile.py --texts train-queries --docs all --dtypes bfloat16 --target-ratio 2

For embedkit's encode loop (``models.batching``: length-sorted token-budget batches) every batch is timed stage by
stage: tokenization (waiting for ``TextBatcher.batches``: a chunk's ``preprocess`` once, each batch cut from it),
the transformer's forward pass, pooling and normalisation (the modules after the transformer), and the copy out to a
float32 NumPy row block. Batches are grouped by padded length (<=64, <=128, <=256 tokens). The forward's useful work
is counted analytically from the model config (per sequence, per layer: 8·L·d² for the Q/K/V/output projections,
4·L·d·ff for the feed-forward, 4·L²·d for attention scores and values; padded positions are counted as the forward
computes them) and divided by the forward's time: the achieved GFLOP/s, as a fraction of ``torch.mm`` on 4096x4096
matrices in the same process, precision and thread count (the best of 5; for bf16 on a CPU without bf16
instructions, where embedkit's bf16 products run in the fp32 kernels, fp32's peak). sentence-transformers' own
``encode`` (at ``--st-batch-size``, under the same autocast) is timed whole, its FLOPs counted over its own batches
(sorted by character length, as it does). Where the default of a dtype is not the torch backend (bf16 on a CPU
where OpenVINO has bf16 kernels), that backend's ``encode`` is also timed whole, its work counted over the torch
row's batches.

``--target-ratio R`` turns the profile into a bound: embedkit's own ``encode`` and sentence-transformers' are timed
in 3 alternating rounds, one more embedkit encode under ``torch.profiler`` gives the seconds its linear layers'
kernels take (the operators that multiply by a weight), and the script prints the time per text that R x the peer
allows, the linears' share of it, and how much everything else (attention, layer norms, casts, tokenizing, pooling)
would have to shrink. The linears already run at the matmul peak on this CPU, so that share is what no lever at the
same precision can take away.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch
from encode_conditions import TEXT_KINDS, benchmark_texts
from encode_report import forward_flops, matmul_peak
from sentence_transformers import SentenceTransformer

from embedkit import load_model
from embedkit.models import cpu_bfloat16, heap
from embedkit.models.batching import TextBatcher
from embedkit.models.cpu_streams import stream_count
from embedkit.models.device import autocast
from embedkit.models.reference import default_model_path

BUCKETS = (64, 128, 256, 512)
LINEAR_KERNELS = {"mkldnn::_linear_pointwise", "aten::addmm", "aten::mm"}  # a linear layer's product, any path


def bucket(length: int) -> str:
    return f"<={next(b for b in BUCKETS if length <= b)}"


def profile_embedkit(model: Any, texts: list[str]) -> dict[str, Any]:
    """Per-stage seconds of embedkit's encode loop (``TextBatcher.batches``), by padded-length bucket, and the
    forward's FLOPs. Tokenizing is the time spent waiting for the next batch. One batch at a time on every torch
    thread, so each stage can be timed (``encode`` itself runs a batch per stream: ``models/cpu_streams.py``)."""
    st, config = model.st, model.st[0].model.config
    stages: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    out = np.empty((len(texts), model.dim), dtype=np.float32)
    batches = TextBatcher.of(model, weightless=False).batches(texts, model.document_prompt)
    start_all = time.perf_counter()
    with torch.inference_mode():
        while True:
            t0 = time.perf_counter()
            try:
                rows, features = next(batches)
            except StopIteration:
                break
            t1 = time.perf_counter()
            with autocast(model.device, model.dtype):
                features = st[0](features)
                t2 = time.perf_counter()
                for module in list(st)[1:]:
                    features = module(features)
            embeddings = features["sentence_embedding"].float()
            if model.normalize:
                embeddings = torch.nn.functional.normalize(embeddings, p=2, dim=1)
            t3 = time.perf_counter()
            out[rows] = embeddings.cpu().numpy()
            t4 = time.perf_counter()
            shape = tuple(features["input_ids"].shape)
            key = bucket(shape[1])
            for name, seconds in (("tokenize", t1 - t0), ("forward", t2 - t1), ("pool", t3 - t2), ("copy", t4 - t3)):
                stages[key][name] += seconds
                stages["all"][name] += seconds
            stages[key]["batches"] += 1
            stages[key]["rows"] += shape[0]
            stages[key]["flops"] += forward_flops(config, *shape)
            stages["all"]["flops"] += forward_flops(config, *shape)
    stages["all"]["total"] = time.perf_counter() - start_all
    return {name: dict(values) for name, values in stages.items()}


def st_seconds(st: SentenceTransformer, texts: list[str], dtype: str, batch_size: int) -> float:
    """Seconds of one sentence-transformers ``encode`` under the same autocast."""
    start = time.perf_counter()
    with autocast("cpu", dtype):
        st.encode(texts, batch_size=batch_size, convert_to_numpy=True)
    return time.perf_counter() - start


def st_encode(st: SentenceTransformer, texts: list[str], dtype: str, batch_size: int) -> tuple[float, float]:
    """Seconds of sentence-transformers' own encode, and its forward FLOPs over its own (char-sorted) batches."""
    config = st[0].model.config
    order = np.argsort([-len(t) for t in texts], kind="stable")
    flops = 0.0
    for first in range(0, len(texts), batch_size):
        batch = [texts[i] for i in order[first : first + batch_size]]
        shape = st.preprocess(batch)["input_ids"].shape
        flops += forward_flops(config, *shape)
    return st_seconds(st, texts, dtype, batch_size), flops


def bound(
    model: Any, st: SentenceTransformer, texts: list[str], dtype: str, batch_size: int, rounds: int = 3
) -> dict[str, float]:
    """ms per text of embedkit's ``encode`` and of sentence-transformers' (alternating rounds, medians), and of
    embedkit's linear layers' kernels alone: their self time in one more encode under ``torch.profiler`` on one
    stream of one torch thread (the profiler does not see threads started inside it), divided by the encode's number
    of streams, which run side by side (exact where each stream has one thread)."""
    from torch.profiler import ProfilerActivity, profile

    ours, peer = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        model.encode(texts, show_progress=False)
        ours.append(time.perf_counter() - start)
        peer.append(st_seconds(st, texts, dtype, batch_size))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            model.encode(texts, show_progress=False)
    finally:
        torch.set_num_threads(threads)
    streams = stream_count(threads)
    linears = sum(e.self_cpu_time_total for e in profiler.key_averages() if e.key in LINEAR_KERNELS) / 1e6 / streams
    per_text = 1000 / len(texts)
    return {
        "embedkit_ms_per_text": round(statistics.median(ours) * per_text, 4),
        "peer_ms_per_text": round(statistics.median(peer) * per_text, 4),
        "linear_ms_per_text": round(linears * per_text, 4),
    }


def print_bound(measured: dict[str, float], ratio: float, batch_size: int) -> None:
    """What ``ratio`` x the peer allows per text, against what the linears alone already take."""
    allowed = measured["peer_ms_per_text"] / ratio
    now, linears = measured["embedkit_ms_per_text"], measured["linear_ms_per_text"]
    rest, room = now - linears, max(0.0, allowed - linears)
    print(
        f"{ratio}x sentence-transformers (batch {batch_size}: {measured['peer_ms_per_text']:.3f} ms per text) "
        f"allows {allowed:.3f} ms; embedkit takes {now:.3f} ms "
        f"({measured['peer_ms_per_text'] / now:.2f}x): its linears {linears:.3f} ms ({linears / allowed:.0%} of the "
        f"allowance), everything else {rest:.3f} ms, which would have to fit in {room:.3f} ms (-{1 - room / rest:.0%})."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--texts", choices=TEXT_KINDS, default="docs")
    parser.add_argument("--docs", default="1000", help="how many texts, or 'all'")
    parser.add_argument("--max-tokens", type=int, help="cut every text to this many word pieces")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated: float32, bfloat16")
    parser.add_argument("--target-ratio", type=float, help="print what this multiple of the peer would need")
    parser.add_argument("--st-batch-size", type=int, default=32, help="sentence-transformers' batch size")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    texts = benchmark_texts(args.dataset, args.texts, args.docs, args.max_tokens)
    malloc = heap.steady()  # as embedkit's encode sets it, for sentence-transformers' rows too (encode.py does alike)
    threads = torch.get_num_threads()
    result: dict[str, Any] = {
        "docs": len(texts),
        "texts": args.texts,
        "max_tokens": args.max_tokens,
        "machine": {
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "threads": threads,
            "malloc": malloc,
        },
        "torch": torch.__version__,
        "rows": {},
    }
    st = SentenceTransformer(str(default_model_path()), device="cpu")
    for dtype in args.dtypes.split(","):
        # no bf16 instructions: embedkit's bf16 products run in the fp32 kernels, so fp32's peak is the limit
        peak_of = "float32" if dtype == "bfloat16" and not cpu_bfloat16.bf16_instructions() else dtype
        peak = matmul_peak({"float32": torch.float32, "bfloat16": torch.bfloat16}[peak_of])
        result[f"matmul_peak_gflops_{dtype}"] = {"of": peak_of, "gflops": round(peak, 1)}
        model = load_model(device="cpu", dtype=dtype, backend="torch")  # stage by stage: the torch path's loop
        model.encode(texts[:32])  # warm-up
        stages = profile_embedkit(model, texts)
        every = stages["all"]
        forward_gflops = every["flops"] / every["forward"] / 1e9
        result["rows"][f"embedkit-{dtype}"] = {
            "docs_per_s": round(len(texts) / every["total"], 2),
            "forward_gflops": round(forward_gflops, 1),
            "fraction_of_peak_forward": round(forward_gflops / peak, 3),
            "fraction_of_peak_overall": round(every["flops"] / every["total"] / 1e9 / peak, 3),
            "stages": {k: {n: round(v, 4) for n, v in s.items()} for k, s in stages.items()},
        }
        default = load_model(device="cpu", dtype=dtype)
        if default.backend != "torch":  # openvino for bf16: timed whole, its work counted over the same batches
            default.encode(texts[:32])
            start = time.perf_counter()
            default.encode(texts)
            seconds = time.perf_counter() - start
            result["rows"][f"embedkit-{dtype}-{default.backend}"] = {
                "docs_per_s": round(len(texts) / seconds, 2),
                "fraction_of_peak_overall": round(every["flops"] / seconds / 1e9 / peak, 3),
            }
        st.encode(texts[:32], batch_size=args.st_batch_size)  # warm-up
        seconds, flops = st_encode(st, texts, dtype, args.st_batch_size)
        result["rows"][f"sentence-transformers-{dtype}"] = {
            "docs_per_s": round(len(texts) / seconds, 2),
            "fraction_of_peak_overall": round(flops / seconds / 1e9 / peak, 3),
            "batch_size": args.st_batch_size,
        }
        if args.target_ratio:
            result[f"bound_{dtype}"] = bound(model, st, texts, dtype, args.st_batch_size)
        print(f"{dtype}: fractions of the {peak_of} torch.mm peak, {peak:.1f} GFLOP/s")
    cut = f", cut to {args.max_tokens} word pieces" if args.max_tokens else ""
    print(f"\n{len(texts)} {args.dataset} {args.texts}{cut}, {threads} threads\n")
    print("| path | docs/s | tokenize s | forward s | pool s | copy s | forward GFLOP/s | of peak: forward | all |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, row in result["rows"].items():
        if "stages" in row:
            s = row["stages"]["all"]
            print(
                f"| {name} | {row['docs_per_s']} | {s['tokenize']:.2f} | {s['forward']:.2f} | {s['pool']:.2f} | "
                f"{s['copy']:.3f} | {row['forward_gflops']} | {row['fraction_of_peak_forward']:.1%} | "
                f"{row['fraction_of_peak_overall']:.1%} |"
            )
        else:
            print(f"| {name} | {row['docs_per_s']} | | | | | | | {row['fraction_of_peak_overall']:.1%} |")
    print("\nBy padded length (embedkit): batches, rows, forward s, forward GFLOP/s")
    for name, row in result["rows"].items():
        for key, s in row.get("stages", {}).items():
            if key != "all":
                rate = s["flops"] / s["forward"] / 1e9
                print(
                    f"  {name} {key}: {int(s['batches'])} batches, {int(s['rows'])} rows, {s['forward']:.2f} s, "
                    f"{rate:.1f} GFLOP/s"
                )
    if args.target_ratio:
        print(f"\nBound (3 alternating rounds, medians; {args.target_ratio}x the peer):")
        for dtype in args.dtypes.split(","):
            print(f"  {dtype}: ", end="")
            print_bound(result[f"bound_{dtype}"], args.target_ratio, args.st_batch_size)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
