"""The bf16 levers issue 16 tried and did not keep, timed against what embedkit does by default, alternating.

    python benchmarks/encode_levers.py --docs 1000 --rounds 2
    python benchmarks/encode_levers.py --texts train-queries --docs all --rounds 3

Rows: sentence-transformers under bf16 autocast at batch 16/32 (the peer), embedkit's default bf16 (on a CPU with
bf16 instructions the oneDNN path of ``models/cpu_bfloat16.py``; encode streams), embedkit's loop with
plain autocast (the default before that path), and, from that plain model, the weights cast to bfloat16 (no
autocast: layer norms, softmax and the residual stream in bf16 too) and that model's transformer compiled by inductor
(``dynamic=True``: one compile serves every batch shape; ``freezing``: weights pre-packed for oneDNN). The one-off
compile time is printed apart; the timed rounds start after it. Cosines are against sentence-transformers bf16 at
batch 32. RESULTS.md has the verdicts: the cast weights miss the cosine bar on queries, the compile costs more than
it saves below ~10^5 texts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch
from encode_conditions import TEXT_KINDS, benchmark_texts
from sentence_transformers import SentenceTransformer

from embedkit import load_model
from embedkit.models.device import autocast
from embedkit.models.reference import default_model_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--texts", choices=TEXT_KINDS, default="docs")
    parser.add_argument("--docs", default="1000", help="a number or 'all'")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    texts = benchmark_texts(args.dataset, args.texts, args.docs, None)

    st = SentenceTransformer(str(default_model_path()), device="cpu")

    def peer(batch_size: int):
        def encode(batch: list[str]) -> np.ndarray:
            with autocast("cpu", "bfloat16"):
                return st.encode(batch, batch_size=batch_size, normalize_embeddings=True)

        return encode

    def autocast_only():
        """embedkit's loop under plain bf16 autocast: the float32 network, run with the bf16 dtype."""
        model = load_model(device="cpu")
        model.dtype = "bfloat16"
        return model

    default = load_model(device="cpu", dtype="bfloat16", backend="torch")
    plain = autocast_only()
    cast = autocast_only()
    cast.st.to(torch.bfloat16)
    compiled = autocast_only()
    compiled.st.to(torch.bfloat16)
    import torch._inductor.config as inductor

    inductor.freezing = True
    network = compiled.st[0].auto_model
    network.forward = torch.compile(network.forward, dynamic=True)
    start = time.perf_counter()
    compiled.encode(texts[:64], show_progress=False)
    print(f"inductor compile (first call): {time.perf_counter() - start:.1f} s")

    rows = {
        "sentence-transformers-bf16 batch 16": peer(16),
        "sentence-transformers-bf16 batch 32": peer(32),
        "embedkit bf16 (default)": lambda batch: default.encode(batch, show_progress=False),
        "embedkit bf16, plain autocast": lambda batch: plain.encode(batch, show_progress=False),
        "weights cast to bf16": lambda batch: cast.encode(batch, show_progress=False),
        "weights cast + torch.compile": lambda batch: compiled.encode(batch, show_progress=False),
    }
    for encode in rows.values():
        encode(texts[:32])
    rates: dict[str, list[float]] = {name: [] for name in rows}
    vectors: dict[str, np.ndarray] = {}
    names = list(rows)
    for round_number in range(args.rounds):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            vectors[name] = np.asarray(rows[name](texts), dtype=np.float32)
            rates[name].append(len(texts) / (time.perf_counter() - start))
    reference = vectors["sentence-transformers-bf16 batch 32"]
    print(f"{len(texts)} {args.texts}, {args.rounds} rounds, {torch.get_num_threads()} threads")
    print("| row | texts/s (median) | min cosine vs ST bf16 |\n| --- | ---: | ---: |")
    for name in names:
        a = vectors[name] / np.linalg.norm(vectors[name], axis=1, keepdims=True)
        b = reference / np.linalg.norm(reference, axis=1, keepdims=True)
        print(f"| {name} | {statistics.median(rates[name]):.1f} | {float((a * b).sum(axis=1).min()):.6f} |")


if __name__ == "__main__":
    main()
