"""Encode the same SciFact documents with embedkit and with sentence-transformers, alternating, in one process.

    python benchmarks/encode.py [--docs 1000] [--rounds 3] [--dtype float32]

Prints docs/s for each per round, the medians and their ratio (embedkit / sentence-transformers), and the minimum
cosine between the two sets of embeddings.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from sentence_transformers import SentenceTransformer

from embedkit import load_dataset, load_model
from embedkit.data import doc_text
from embedkit.models.loading import default_model_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()

    corpus = load_dataset(args.dataset).corpus.select(range(args.docs))
    texts = [doc_text(doc) for doc in corpus]
    ours = load_model(dtype=args.dtype, device="cpu")
    theirs = SentenceTransformer(str(default_model_path()), device="cpu")
    print(
        f"{len(texts)} {args.dataset} documents, max_length {ours.max_length}, {torch.get_num_threads()} threads, "
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}"
    )
    rates: dict[str, list[float]] = {"embedkit": [], "sentence-transformers": []}
    for round_number in range(1, args.rounds + 1):
        start = time.perf_counter()
        mine = ours.encode(texts, show_progress=False)
        rates["embedkit"].append(len(texts) / (time.perf_counter() - start))
        start = time.perf_counter()
        reference = theirs.encode(texts, batch_size=32, convert_to_numpy=True)
        rates["sentence-transformers"].append(len(texts) / (time.perf_counter() - start))
        print(
            f"round {round_number}: embedkit {rates['embedkit'][-1]:.1f} docs/s, "
            f"sentence-transformers {rates['sentence-transformers'][-1]:.1f} docs/s"
        )
    ours_median = statistics.median(rates["embedkit"])
    theirs_median = statistics.median(rates["sentence-transformers"])
    cosine = float((mine * reference).sum(axis=1).min())
    print(
        f"median: embedkit {ours_median:.1f} docs/s, sentence-transformers {theirs_median:.1f} docs/s, "
        f"ratio {ours_median / theirs_median:.2f}; min cosine {cosine:.6f}"
    )


if __name__ == "__main__":
    main()
