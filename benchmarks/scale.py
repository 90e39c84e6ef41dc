"""The scale curve: encode, build and search cost against corpus size, with fitted growth and predictions.

    python benchmarks/index.py --sizes 10000,100000,1000000      # first: index build/search at three sizes
    python benchmarks/scale.py [--encode-sizes 500,1000,2000,5183] [--dtype bfloat16] [--index runs/bench-index]

Encoding is measured on SciFact documents (at most its 5,183 on this corpus) with the default model, each size in a
fresh child process (time and peak RSS); the index figures are read from ``benchmarks/index.py``'s result (embedkit
rows: Flat and the IVF-PQ family). Each quantity is fitted twice, as ``cost = c * n^a`` (least squares in log-log
space: the growth exponent) and as ``cost = fixed + slope * n`` (the better predictor where a fixed cost dominates the
small sizes), and both are extrapolated to 10 M and 100 M. Writes ``result.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from peak_memory import peak_rss_mib

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TARGETS = (10_000_000, 100_000_000)


def encode_worker(n: int, dtype: str) -> dict:
    from embedkit import load_dataset, load_model
    from embedkit.data import doc_text

    model = load_model(device="cpu", dtype=dtype)
    texts = [doc_text(row) for row in load_dataset("scifact").corpus.select(range(n))]
    model.encode(texts[:16])  # warm-up
    begun = time.perf_counter()
    model.encode(texts)
    seconds = time.perf_counter() - begun
    return {
        "n": n,
        "seconds": round(seconds, 2),
        "peak_rss_gib": peak_rss_mib() / 1024,
    }


def fit(sizes: list[float], values: list[float]) -> dict:
    """Two fits of the same points, each with its predictions at the target sizes.

    ``value = c * n^a`` (least squares in log-log space) gives the growth exponent; ``value = fixed + slope * n``
    (least squares) is the better predictor where a fixed cost dominates the small sizes (training an IVF-PQ quantiser
    on a fixed-size sample, the interpreter's own memory), which flattens the power law and under-predicts.
    """
    a, log_c = np.polyfit(np.log(sizes), np.log(values), 1)
    slope, fixed = np.polyfit(np.asarray(sizes, dtype=float), np.asarray(values, dtype=float), 1)
    return {
        "exponent": round(float(a), 3),
        **{f"at_{t:.0e}": float(np.exp(log_c) * t**a) for t in TARGETS},
        "affine": {"fixed": float(fixed), "per_million": float(slope * 1e6)},
        **{f"affine_at_{t:.0e}": float(fixed + slope * t) for t in TARGETS},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encode-sizes", default="500,1000,2000,5183")
    parser.add_argument("--dtype", default="bfloat16", help="encoder dtype (float32 | bfloat16)")
    parser.add_argument("--index", default="runs/bench-index", help="folder of benchmarks/index.py's result.json")
    parser.add_argument("--output", default="runs/bench-scale")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(encode_worker(args.worker, args.dtype)))
        return
    curves: dict[str, dict] = {}
    encode_rows = []
    for n in [int(s) for s in args.encode_sizes.split(",")]:
        done = subprocess.run(
            [sys.executable, __file__, "--worker", str(n), "--dtype", args.dtype],
            check=True,
            capture_output=True,
            text=True,
        )
        encode_rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print("encode", encode_rows[-1], flush=True)
    sizes = [r["n"] for r in encode_rows]
    for measure, key in (("seconds", "seconds"), ("peak RSS GiB", "peak_rss_gib")):
        values = [r[key] for r in encode_rows]
        curves[f"encode ({args.dtype}) {measure}"] = {"points": dict(zip(sizes, values)), **fit(sizes, values)}
    index_result = json.loads((Path(args.index) / "result.json").read_text())
    families = {"Flat": lambda f: f == "Flat", "IVF-PQ48": lambda f: f.startswith("IVF") and f.endswith(",PQ48")}
    for family, belongs in families.items():
        rows = sorted((r for r in index_result["rows"] if belongs(r["factory"])), key=lambda r: r["n"])
        if len(rows) < 2:
            continue
        n = [r["n"] for r in rows]
        measures = {
            "build seconds": [max(r["embedkit"]["build_s"], 1e-3) for r in rows],
            "search ms per query": [1000 / r["embedkit"]["qps"] for r in rows],
            "peak RSS GiB": [r["embedkit"]["peak_rss_gib"] for r in rows],
        }
        for measure, values in measures.items():
            curves[f"{family} {measure}"] = {"points": dict(zip(n, values)), **fit(n, values)}
    print(
        "\n| quantity | measured (n: value) | growth n^a | n^a at 10 M | n^a at 100 M | fixed + per 1 M "
        "| affine at 10 M | affine at 100 M |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, curve in curves.items():
        points = ", ".join(f"{k:,}: {v:.3g}" for k, v in curve["points"].items())
        affine = f"{curve['affine']['fixed']:.3g} + {curve['affine']['per_million']:.3g}"
        print(
            f"| {name} | {points} | {curve['exponent']} | {curve['at_1e+07']:.3g} | {curve['at_1e+08']:.3g} "
            f"| {affine} | {curve['affine_at_1e+07']:.3g} | {curve['affine_at_1e+08']:.3g} |"
        )
    Path(args.output).mkdir(parents=True, exist_ok=True)
    (Path(args.output) / "result.json").write_text(json.dumps({"encode": encode_rows, "curves": curves}, indent=2))


if __name__ == "__main__":
    main()
