"""End-to-end SciFact evaluation: embedkit vs BEIR's exact-search pipeline vs ``mteb.evaluate``, in one process.

    python benchmarks/evaluate_e2e.py [--output runs/bench-e2e] [--backends torch] [--threads 2]

Each pipeline starts from the same model folder (the packaged all-MiniLM-L6-v2) and the same local SciFact files and
does all of its own work: encode the 5,183 documents and 300 test queries, search exactly, score. No embedding cache
is reused (embedkit writes its cache to a fresh temporary folder; MTEB runs with ``cache=None``). The peers run with
their defaults: BEIR ``DenseRetrievalExactSearch`` (batch 128, cosine) over ``models.SentenceBERT``; MTEB over the
``SentenceTransformer`` itself. ``--backends torch,torch-bf16`` adds embedkit rows with other CPU backends. Prints
wall time and nDCG@10 for each, and the ratios to embedkit's first row; writes ``result.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch

from embedkit import evaluate, load_dataset, load_model
from embedkit.models.loading import default_model_path
from embedkit.storage import write_json


def run_embedkit(data, backend: str) -> tuple[float, float]:
    """``backend`` is ``torch`` (fp32), ``torch-bf16`` (bf16 autocast) or any ``load_model`` backend name."""
    begun = time.perf_counter()
    kwargs = {"dtype": "bfloat16"} if backend == "torch-bf16" else {}
    if backend not in ("torch", "torch-bf16"):
        kwargs["backend"] = backend
    model = load_model(device="cpu", **kwargs)
    with tempfile.TemporaryDirectory() as cache:
        report = evaluate(model, data, "test", cache_dir=cache)
    return time.perf_counter() - begun, report["metrics"]["ndcg_at_10"]


def run_beir(data) -> tuple[float, float]:
    from beir.retrieval import models
    from beir.retrieval.evaluation import EvaluateRetrieval
    from beir.retrieval.search.dense import DenseRetrievalExactSearch

    begun = time.perf_counter()
    corpus = {row["_id"]: {"title": row["title"], "text": row["text"]} for row in data.corpus}
    queries, qrels = data.split_queries("test"), data.qrels("test")
    searcher = DenseRetrievalExactSearch(models.SentenceBERT(str(default_model_path())), batch_size=128)
    retriever = EvaluateRetrieval(searcher, score_function="cos_sim")
    results = retriever.retrieve(corpus, queries)
    ndcg, _, _, _ = retriever.evaluate(qrels, results, [10])
    return time.perf_counter() - begun, ndcg["NDCG@10"]


def run_mteb(data) -> tuple[float, float]:
    import mteb
    from sentence_transformers import SentenceTransformer

    from embedkit.integrations.mteb import beir_task

    begun = time.perf_counter()
    model = SentenceTransformer(str(default_model_path()), device="cpu")
    task = beir_task(data, "test")
    result = mteb.evaluate(model, tasks=[task], cache=None, show_progress_bar=False)
    scores = result.task_results[0].scores["test"][0]
    return time.perf_counter() - begun, float(scores["ndcg_at_10"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="runs/bench-e2e")
    parser.add_argument("--backends", default="torch", help="embedkit rows: torch, torch-bf16, torch-int8, onnx, ...")
    parser.add_argument("--peers", default="beir,mteb")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data = load_dataset("scifact")
    data.corpus  # noqa: B018 - read the files before any timer starts, for every pipeline alike
    rows: dict[str, dict[str, float]] = {}
    for backend in args.backends.split(","):
        seconds, ndcg = run_embedkit(data, backend)
        rows[f"embedkit ({backend})"] = {"wall_s": round(seconds, 1), "ndcg_at_10": ndcg}
        print(f"embedkit ({backend}): {seconds:.1f} s, nDCG@10 {ndcg:.4f}", flush=True)
    peers = {
        "beir": ("BEIR EvaluateRetrieval + DenseRetrievalExactSearch", run_beir),
        "mteb": ("mteb.evaluate", run_mteb),
    }
    for name in args.peers.split(","):
        label, runner = peers[name]
        seconds, ndcg = runner(data)
        rows[label] = {"wall_s": round(seconds, 1), "ndcg_at_10": ndcg}
        print(f"{label}: {seconds:.1f} s, nDCG@10 {ndcg:.4f}", flush=True)
    first = next(iter(rows.values()))["wall_s"]
    print(f"\n| pipeline | wall s | nDCG@10 | time / embedkit ({args.backends.split(',')[0]}) |")
    print("| --- | --- | --- | --- |")
    for label, row in rows.items():
        print(f"| {label} | {row['wall_s']} | {row['ndcg_at_10']:.4f} | {row['wall_s'] / first:.2f} |")
    result = {"rows": rows, "threads": args.threads, "machine": platform.processor() or platform.machine()}
    write_json(Path(args.output) / "result.json", result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
