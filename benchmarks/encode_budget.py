"""Choose the CPU's default token budget (``batch_tokens``) on texts that ``encode.py`` does not time.

    python benchmarks/encode_budget.py --output benchmarks/results/encode_budget.json

SciFact documents ``--start`` to ``--start + --docs`` (by default 1,000-1,499: ``encode.py`` times the first 1,000), in
float32 and bfloat16 (autocast), each budget of ``--budgets`` against sentence-transformers' ``encode`` at
``--st-batch-size`` under the same precision, alternating in rounds in one process. The default is the budget with
the highest median texts/s summed over both precisions; the script prints it and the JSON records every rate.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

from embedkit import load_dataset, load_model
from embedkit.data import doc_text
from embedkit.models.device import autocast
from embedkit.models.reference import default_model_path
from embedkit.storage import write_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=int, default=1000)
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--budgets", default="2048,4096,8192,16384")
    parser.add_argument("--st-batch-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    budgets = [int(value) for value in args.budgets.split(",")]
    corpus = load_dataset("scifact").corpus
    texts = [doc_text(doc) for doc in corpus.select(range(args.start, min(len(corpus), args.start + args.docs)))]
    peer = SentenceTransformer(str(default_model_path()), device="cpu")
    rows: dict[str, object] = {}
    for dtype in ("float32", "bfloat16"):
        model = load_model(dtype=dtype, device="cpu")
        rows[f"sentence-transformers {dtype}"] = lambda texts, dtype=dtype: _peer(
            peer, dtype, texts, args.st_batch_size
        )
        for budget in budgets:
            rows[f"embedkit {dtype} {budget}"] = lambda texts, model=model, budget=budget: _ours(model, budget, texts)
    names = list(rows)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for number in range(args.rounds):
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            rows[name](texts)
            rates[name].append(len(texts) / (time.perf_counter() - start))
        print(f"round {number + 1}: " + ", ".join(f"{n} {rates[n][-1]:.1f}" for n in names), flush=True)
    medians = {name: round(statistics.median(values), 2) for name, values in rates.items()}
    totals = {b: sum(medians[f"embedkit {d} {b}"] for d in ("float32", "bfloat16")) for b in budgets}
    best = max(totals, key=totals.__getitem__)
    for name, median in medians.items():
        print(f"{name}: {median:.1f} texts/s")
    print(f"best budget: {best}")
    if args.output:
        write_json(
            args.output,
            {
                "command": " ".join(["python", "benchmarks/encode_budget.py", *sys.argv[1:]]),
                "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "texts": f"SciFact documents {args.start}-{args.start + len(texts) - 1}",
                "threads": torch.get_num_threads(),
                "torch": torch.__version__,
                "rates": {name: [round(v, 2) for v in values] for name, values in rates.items()},
                "median_texts_per_s": medians,
                "best_budget": best,
            },
        )


def _peer(peer: SentenceTransformer, dtype: str, texts: list[str], batch_size: int) -> np.ndarray:
    with autocast("cpu", dtype):
        return peer.encode(texts, batch_size=batch_size, convert_to_numpy=True)


def _ours(model, budget: int, texts: list[str]) -> np.ndarray:
    model.batch_tokens = budget
    return model.encode(texts, show_progress=False)


if __name__ == "__main__":
    main()
