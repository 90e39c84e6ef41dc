"""Encode the same SciFact documents with each embedkit backend and with sentence-transformers, alternating.

    python benchmarks/encode.py                                   # 1,000 documents, 3 rounds, every backend
    python benchmarks/encode.py --docs all --rounds 1 --ndcg --output runs/bench-encode.json
    python benchmarks/encode.py --docs 100 --rounds 1 --backends torch,onnx-int8 --no-rss

Encoders: ``sentence-transformers`` (its own fp32 ``encode``, batch 32: the reference), and embedkit's ``torch``
(fp32), ``torch-bf16`` (bfloat16 autocast), ``torch-int8``, ``onnx`` and ``onnx-int8`` (``load_model(backend=...)``).
All are loaded in one process and timed in rounds, each round running every encoder once (the order rotated per
round), so a busy machine slows them alike; the medians and their ratio to sentence-transformers are printed,
with the min/mean cosine of each encoder's embeddings to sentence-transformers' fp32 ones.

Peak RSS: each encoder is loaded again in a child process of its own that encodes the same texts once; its peak
resident memory (Linux ``VmHWM``: Python, torch, the model, its activations) is reported next to the child's peak
before the model was loaded (imports and texts alone), so the difference is the encoder's own cost.

``--ndcg``: nDCG@10 and recall@100 on the dataset's test split per encoder: the full corpus and the test queries
encoded with that encoder (the timed embeddings are reused when ``--docs all``), exact inner-product search (a FAISS
Flat index) and embedkit's metrics (pytrec_eval). Results go to ``--output`` as JSON too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch
from peak_memory import peak_rss_mib
from sentence_transformers import SentenceTransformer

from embedkit import load_dataset, load_model
from embedkit.data import doc_text
from embedkit.errors import EmbedkitError
from embedkit.models.loading import default_model_path

REFERENCE = "sentence-transformers"
# name -> load_model arguments
BACKENDS: dict[str, dict[str, str]] = {
    "torch": {"backend": "torch", "dtype": "float32"},
    "torch-bf16": {"backend": "torch", "dtype": "bfloat16"},
    "torch-int8": {"backend": "torch-int8"},
    "onnx": {"backend": "onnx"},
    "onnx-int8": {"backend": "onnx-int8"},
}
Encoder = Callable[[list[str]], np.ndarray]


def _encoders(names: list[str]) -> tuple[dict[str, Encoder], dict[str, Any]]:
    """Load every encoder; returns their encode functions and the embedkit models (for settings and queries)."""
    encoders: dict[str, Encoder] = {}
    models: dict[str, Any] = {}
    for name in names:
        if name == REFERENCE:
            st = SentenceTransformer(str(default_model_path()), device="cpu")
            encoders[name] = lambda texts, st=st: st.encode(texts, batch_size=32, convert_to_numpy=True)
            continue
        start = time.perf_counter()
        model = load_model(device="cpu", **BACKENDS[name])
        print(f"loaded {name} in {time.perf_counter() - start:.1f} s (an ONNX export is cached after its first run)")
        encoders[name] = lambda texts, model=model: model.encode(texts, show_progress=False)
        models[name] = model
    return encoders, models


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


def child(args: argparse.Namespace) -> None:
    """One encoder in a fresh process: its peak RSS over loading and one encode of the texts.

    The texts come in a JSON file: loading the dataset itself peaks far above any encoder and would hide them.
    """
    texts = json.loads(Path(args.texts_file).read_text())
    before = peak_rss_mib()
    encoders, _ = _encoders([args.child])
    encoders[args.child](texts)
    print(json.dumps({"rss_before_load_mb": round(before, 1), "peak_rss_mb": round(peak_rss_mib(), 1)}))


def _texts(args: argparse.Namespace) -> list[str]:
    corpus = load_dataset(args.dataset).corpus
    count = len(corpus) if args.docs == "all" else min(int(args.docs), len(corpus))
    return [doc_text(doc) for doc in corpus.select(range(count))]


def _peak_rss(texts_file: Path, name: str) -> dict[str, float] | None:
    command = [sys.executable, __file__, "--child", name, "--texts-file", str(texts_file)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"peak RSS of {name}: the child failed: {done.stderr.strip().splitlines()[-1:]}")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def _ndcg(encode: Encoder, model: Any, data: Any, corpus_embeddings: np.ndarray | None) -> dict[str, float]:
    """nDCG@10 and recall@100 on the test split: exact inner-product (Flat) search, embedkit's metrics."""
    from embedkit.evaluation.metrics import compute_metrics
    from embedkit.index.faiss_index import Index

    corpus = data.corpus
    if corpus_embeddings is None:
        corpus_embeddings = encode([doc_text(doc) for doc in corpus])
    qrels, queries = data.qrels("test"), data.split_queries("test")
    query_ids = list(queries)
    texts = [queries[q] for q in query_ids]
    # embedkit's query side adds the model's query prompt (none for all-MiniLM-L6-v2); sentence-transformers' doesn't.
    query_embeddings = model.encode_queries(texts) if model is not None else encode(texts)
    index = Index.build(corpus_embeddings, [str(i) for i in corpus["_id"]], factory="Flat", metric="ip", use_gpu=False)
    scores, hits = index.search(query_embeddings, 100)
    run = {
        q: {doc: float(s) for doc, s in zip(row_hits, row_scores)}
        for q, row_hits, row_scores in zip(query_ids, hits, scores)
    }
    means, _ = compute_metrics(qrels, run)
    return {"ndcg_at_10": round(means["ndcg_at_10"], 4), "recall_at_100": round(means["recall_at_100"], 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="scifact", help="BEIR dataset name or folder")
    parser.add_argument("--docs", default="1000", help="documents timed: a number or 'all'")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", default=",".join([REFERENCE, *BACKENDS]), help="comma-separated encoders")
    parser.add_argument("--ndcg", action="store_true", help="also nDCG@10 on the test split per encoder")
    parser.add_argument("--no-rss", dest="rss", action="store_false", help="skip the per-encoder child processes")
    parser.add_argument("--output", type=Path, help="JSON file for the results")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--texts-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.docs != "all" and not args.docs.isdigit():
        parser.error("--docs takes a number or 'all'")
    if args.child:
        child(args)
        return

    names = [name.strip() for name in args.backends.split(",") if name.strip()]
    unknown = [name for name in names if name != REFERENCE and name not in BACKENDS]
    if unknown:
        parser.error(f"unknown encoders {unknown} (choose from {REFERENCE}, {', '.join(BACKENDS)})")
    texts = _texts(args)
    try:
        encoders, models = _encoders(names)
    except EmbedkitError as error:
        sys.exit(f"cannot load an encoder: {error}")
    machine = {
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    print(f"{len(texts)} {args.dataset} documents, {args.rounds} rounds; {machine}")

    rates: dict[str, list[float]] = {name: [] for name in names}
    embedded: dict[str, np.ndarray] = {}
    for round_number in range(args.rounds):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            embedded[name] = encoders[name](texts)
            rates[name].append(len(texts) / (time.perf_counter() - start))
        print(f"round {round_number + 1}: " + ", ".join(f"{n} {rates[n][-1]:.1f}" for n in names) + " docs/s")

    reference = embedded.get(REFERENCE)
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        median = statistics.median(rates[name])
        row: dict[str, Any] = {"docs_per_s": [round(r, 2) for r in rates[name]], "median_docs_per_s": round(median, 2)}
        if reference is not None:
            cosines = _cosines(embedded[name], reference)
            row["ratio_vs_st"] = round(median / statistics.median(rates[REFERENCE]), 3)
            row["cosine_vs_st"] = {"min": round(float(cosines.min()), 6), "mean": round(float(cosines.mean()), 6)}
        if name in models:
            row["settings"] = models[name].settings
        results[name] = row

    if args.rss:
        with tempfile.TemporaryDirectory() as tmp:
            texts_file = Path(tmp) / "texts.json"
            texts_file.write_text(json.dumps(texts))
            for name in names:
                results[name]["rss"] = _peak_rss(texts_file, name)
                print(f"peak RSS {name}: {results[name]['rss']}")

    if args.ndcg:
        data = load_dataset(args.dataset)
        whole = len(texts) == len(data.corpus)
        for name in names:
            start = time.perf_counter()
            results[name].update(_ndcg(encoders[name], models.get(name), data, embedded[name] if whole else None))
            print(f"nDCG@10 {name}: {results[name]['ndcg_at_10']:.4f} ({time.perf_counter() - start:.0f} s)")

    print()
    print("| encoder | docs/s (median) | ratio vs ST | min cos vs ST | mean cos vs ST | peak RSS MB | nDCG@10 |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, row in results.items():
        cos = row.get("cosine_vs_st", {})
        rss = (row.get("rss") or {}).get("peak_rss_mb", "")
        cells = [
            name,
            f"{row['median_docs_per_s']:.1f}",
            f"{row['ratio_vs_st']:.2f}" if "ratio_vs_st" in row else "",
            f"{cos['min']:.6f}" if cos else "",
            f"{cos['mean']:.6f}" if cos else "",
            str(rss),
            f"{row['ndcg_at_10']:.4f}" if "ndcg_at_10" in row else "",
        ]
        print("| " + " | ".join(cells) + " |")
    if args.output:
        from embedkit.storage import write_json

        write_json(
            args.output,
            {
                "dataset": args.dataset,
                "documents": len(texts),
                "machine": machine,
                "rounds": args.rounds,
                "encoders": results,
            },
        )
        print(f"written to {args.output}")


if __name__ == "__main__":
    main()
