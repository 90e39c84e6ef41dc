"""What fixing glibc's malloc thresholds (``embedkit/models/heap.py``) does to an encode, in fresh processes.

    python benchmarks/encode_heap.py                                  # 1,000 SciFact documents, 3 rounds
    python benchmarks/encode_heap.py --texts train-queries --docs all --st-batch-size 32

The setting is process-wide, so ``encode.py`` (every encoder in one process) applies it to all its contenders alike
and its ratios compare the kernels. Here each round starts one fresh process per cell: embedkit bf16 and
sentence-transformers bf16 (``torch.autocast``, at ``--st-batch-size``), each with glibc's default thresholds and
with the fixed ones, the order rotated per round. A child loads its encoder, encodes 32 texts to warm up, then times
``--repeats`` encodes of all the texts (their median) and counts the minor page faults per encode (``getrusage``).
Printed: median texts/s and faults per cell, and embedkit as its users run it (fixed) against sentence-transformers
as its users run it (default): the ratio a separate-process comparison gives.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from encode_conditions import TEXT_KINDS, benchmark_texts

CELLS = (
    ("embedkit", "default"),
    ("embedkit", "fixed"),
    ("sentence-transformers", "default"),
    ("sentence-transformers", "fixed"),
)


def child(args: argparse.Namespace) -> None:
    from embedkit.models import heap

    texts = benchmark_texts(args.dataset, args.texts, args.docs, args.max_tokens)
    if args.encoder == "embedkit":
        from embedkit import load_model

        if args.heap == "default":
            heap.steady = lambda: "default"  # the encode loop's call becomes a no-op
        model = load_model(device="cpu", dtype="bfloat16", backend="torch")

        def encode(batch: list[str]) -> object:
            return model.encode(batch, show_progress=False)
    else:
        import torch
        from sentence_transformers import SentenceTransformer

        from embedkit.models.reference import default_model_path

        if args.heap == "fixed":
            heap.steady()
        st = SentenceTransformer(str(default_model_path()), device="cpu")

        def encode(batch: list[str]) -> object:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return st.encode(batch, batch_size=args.st_batch_size)

    encode(texts[:32])
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    seconds = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        encode(texts)
        seconds.append(time.perf_counter() - start)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / args.repeats
    print(json.dumps({"texts_per_s": len(texts) / statistics.median(seconds), "faults": faults, "texts": len(texts)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--texts", default="docs", choices=TEXT_KINDS)
    parser.add_argument("--docs", default="1000", help="how many texts, or 'all'")
    parser.add_argument("--max-tokens", type=int, help="cut every text to this many word pieces")
    parser.add_argument("--st-batch-size", type=int, default=16, help="sentence-transformers' batch size")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="timed encodes per child (their median)")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--encoder", help=argparse.SUPPRESS)
    parser.add_argument("--heap", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.encoder:
        child(args)
        return
    passed = ["--dataset", args.dataset, "--texts", args.texts, "--docs", args.docs]
    passed += ["--st-batch-size", str(args.st_batch_size), "--repeats", str(args.repeats)]
    passed += ["--max-tokens", str(args.max_tokens)] if args.max_tokens else []
    results: dict[str, list[dict[str, float]]] = {f"{e} {h}": [] for e, h in CELLS}
    for round_ in range(args.rounds):
        for encoder, setting in CELLS[round_ % 4 :] + CELLS[: round_ % 4]:
            command = [sys.executable, __file__, *passed, "--encoder", encoder, "--heap", setting]
            line = subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            results[f"{encoder} {setting}"].append(json.loads(line))
            print(f"round {round_ + 1}: {encoder}, {setting} heap: {json.loads(line)}", flush=True)
    medians = {
        cell: {key: statistics.median(run[key] for run in runs) for key in ("texts_per_s", "faults")}
        for cell, runs in results.items()
    }
    print(f"\n{args.texts}, {args.rounds} rounds, sentence-transformers at batch {args.st_batch_size}\n")
    print("| encoder | glibc thresholds | texts/s (median) | minor faults per encode (median) |")
    print("|---|---|---:|---:|")
    for cell, median in medians.items():
        print(
            f"| {cell.rsplit(' ', 1)[0]} | {cell.rsplit(' ', 1)[1]} | {median['texts_per_s']:.1f} | "
            f"{median['faults']:,.0f} |"
        )
    peer = medians["sentence-transformers default"]["texts_per_s"]
    print(
        f"\nembedkit fixed / sentence-transformers default (each as its users run it): "
        f"{medians['embedkit fixed']['texts_per_s'] / peer:.2f}x; both fixed (encode.py's one process): "
        f"{medians['embedkit fixed']['texts_per_s'] / medians['sentence-transformers fixed']['texts_per_s']:.2f}x; "
        f"both default: {medians['embedkit default']['texts_per_s'] / peer:.2f}x"
    )
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(
            json.dumps(
                {"args": {k: str(v) for k, v in vars(args).items()}, "runs": results, "medians": medians}, indent=2
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
