"""End-to-end SciFact evaluation: embedkit vs BEIR's exact-search pipeline vs ``mteb.evaluate``, in one process.

    python benchmarks/evaluate_e2e.py [--output runs/bench-e2e] [--backends torch] [--threads 2] [--rounds 3]

Each pipeline starts from the same model folder (the packaged all-MiniLM-L6-v2) and the same local SciFact files and
does all of its own work: load its model, encode the 5,183 documents and 300 test queries, search exactly, score.
The peers run with their defaults: BEIR ``DenseRetrievalExactSearch`` (batch 128, cosine) over
``models.SentenceBERT``; MTEB over the ``SentenceTransformer`` itself. ``--backends torch,torch-bf16`` adds embedkit
rows with other CPU backends (an ONNX backend exports its graph once and caches it; run it once beforehand, or round
1 includes the export).

Rounds: ``--rounds`` (3) rounds, each running every contender once, the order rotated per round so a busy machine
slows them alike. Every round starts cold for every contender: the SciFact files are read afresh before the round's
timers (a new ``load_dataset``, so nothing embedkit derived in an earlier round, such as its corpus hash, is
reused), embedkit writes its embeddings cache to a fresh temporary folder per run, MTEB runs a newly created task
with ``cache=None``, and each contender loads its model inside its timer. Prints each round's wall times, then the
median wall time and nDCG@10 per contender and the ratio of medians to embedkit's first row; ``result.json`` keeps
every round's times.

MTEB's data (``--mteb-data mteb``, the default) comes from MTEB's own loader, offline: ``SciFact`` normally loads
``mteb/scifact`` from the Hugging Face Hub, which offline fails in ``datasets.get_dataset_config_names`` with
``ConnectionError: Couldn't reach 'mteb/scifact' on the Hub (OfflineModeIsEnabled)``. Its loader
(``RetrievalDatasetLoader``, run by ``task.load_data()``) only calls ``datasets.load_dataset(path, config, ...)``, which
also takes a local folder laid out like the Hub repo: a ``README.md`` whose ``configs:`` name ``default`` (the qrels),
``corpus`` and ``queries``. So each round builds one in a temporary folder (``corpus.jsonl.gz`` and
``queries.jsonl.gz`` linked unchanged from the BEIR folder, ``qrels/test.jsonl`` written from ``qrels/test.tsv``)
and points the task's ``metadata.dataset["path"]`` at it (on the instance; the revision is ignored for a local
folder). The qrels are rewritten because ``datasets`` picks one builder for every config of a folder, from the files
of its first config: next to ``.jsonl.gz`` files, BEIR's ``.tsv`` would be read by the JSON builder (or the JSON by
the CSV one). MTEB loads that folder before its timer, as embedkit's data is read before its own, into a fresh
temporary ``datasets`` cache. ``--mteb-data embedkit`` feeds MTEB from embedkit's loader instead
(``embedkit.integrations.mteb.beir_task`` sets ``task.dataset``); both give the same corpus, queries and qrels.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch

from embedkit import evaluate, load_dataset, load_model
from embedkit.models.reference import default_model_path
from embedkit.storage import write_json

BEIR_LABEL = "BEIR EvaluateRetrieval + DenseRetrievalExactSearch"
MTEB_LABEL = "mteb.evaluate"
SPLIT = "test"
Runner = Callable[[Any, Any], tuple[float, float]]


def run_embedkit(data, backend: str) -> tuple[float, float]:
    """``backend`` is ``torch`` (fp32), ``torch-bf16`` (bf16 autocast) or any ``load_model`` backend name."""
    begun = time.perf_counter()
    kwargs = {"dtype": "bfloat16"} if backend == "torch-bf16" else {}
    if backend not in ("torch", "torch-bf16"):
        kwargs["backend"] = backend
    model = load_model(device="cpu", **kwargs)
    with tempfile.TemporaryDirectory() as cache:
        report = evaluate(model, data, SPLIT, cache_dir=cache)
    return time.perf_counter() - begun, report["metrics"]["ndcg_at_10"]


def run_beir(data) -> tuple[float, float]:
    from beir.retrieval import models
    from beir.retrieval.evaluation import EvaluateRetrieval
    from beir.retrieval.search.dense import DenseRetrievalExactSearch

    begun = time.perf_counter()
    corpus = {row["_id"]: {"title": row["title"], "text": row["text"]} for row in data.corpus}
    queries, qrels = data.split_queries(SPLIT), data.qrels(SPLIT)
    searcher = DenseRetrievalExactSearch(models.SentenceBERT(str(default_model_path())), batch_size=128)
    retriever = EvaluateRetrieval(searcher, score_function="cos_sim")
    results = retriever.retrieve(corpus, queries)
    ndcg, _, _, _ = retriever.evaluate(qrels, results, [10])
    return time.perf_counter() - begun, ndcg["NDCG@10"]


def run_mteb(task) -> tuple[float, float]:
    """``task``: MTEB's SciFact with its data already loaded (see ``mteb_task``), so the timer holds MTEB's work."""
    import mteb
    from sentence_transformers import SentenceTransformer

    begun = time.perf_counter()
    model = SentenceTransformer(str(default_model_path()), device="cpu")
    result = mteb.evaluate(model, tasks=[task], cache=None, show_progress_bar=False)
    scores = result.task_results[0].scores[SPLIT][0]
    return time.perf_counter() - begun, float(scores["ndcg_at_10"])


def mteb_task(data, source: str, scratch: Path) -> Any:
    """A new MTEB SciFact task with its data loaded: by MTEB's own loader from ``scratch`` or from embedkit's."""

    from embedkit.integrations.mteb import beir_task, task_loaded_by_mteb

    if source == "embedkit":
        return beir_task(data, SPLIT)
    return task_loaded_by_mteb(data, SPLIT, "SciFact", scratch)


def fresh_data():
    """SciFact read afresh: corpus, queries and test qrels in memory before any timer, for every pipeline alike."""
    data = load_dataset("scifact")
    data.corpus  # noqa: B018 - read the files before any timer starts
    data.split_queries(SPLIT)
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="runs/bench-e2e")
    parser.add_argument("--backends", default="torch", help="embedkit rows: torch, torch-bf16, torch-int8, onnx, ...")
    parser.add_argument("--peers", default="beir,mteb")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every contender, the order rotated")
    parser.add_argument(
        "--mteb-data",
        choices=("mteb", "embedkit"),
        default="mteb",
        help="MTEB's data: its own loader over a local Hub-like folder, or embedkit's loader",
    )
    args = parser.parse_args()
    peers = [name.strip() for name in args.peers.split(",") if name.strip()]
    if not set(peers) <= {"beir", "mteb"}:
        parser.error(f"unknown peers {sorted(set(peers) - {'beir', 'mteb'})} (choose from beir, mteb)")
    if args.rounds < 1:
        parser.error("--rounds takes a positive number")
    torch.set_num_threads(args.threads)
    backends = [name.strip() for name in args.backends.split(",") if name.strip()]
    contenders: dict[str, Runner] = {
        f"embedkit ({backend})": lambda data, task, backend=backend: run_embedkit(data, backend) for backend in backends
    }
    if "beir" in peers:
        contenders[BEIR_LABEL] = lambda data, task: run_beir(data)
    if "mteb" in peers:
        contenders[MTEB_LABEL] = lambda data, task: run_mteb(task)

    labels = list(contenders)
    seconds: dict[str, list[float]] = {label: [] for label in labels}
    ndcgs: dict[str, list[float]] = {label: [] for label in labels}
    orders: list[list[str]] = []
    for round_number in range(args.rounds):
        shift = round_number % len(labels)
        order = labels[shift:] + labels[:shift]
        orders.append(order)
        with tempfile.TemporaryDirectory() as scratch:
            data = fresh_data()
            task = mteb_task(data, args.mteb_data, Path(scratch)) if "mteb" in peers else None
            for label in order:
                wall, ndcg = contenders[label](data, task)
                seconds[label].append(wall)
                ndcgs[label].append(ndcg)
                print(f"round {round_number + 1}: {label}: {wall:.1f} s, nDCG@10 {ndcg:.4f}", flush=True)
            del task  # its Arrow files live in ``scratch``

    rows: dict[str, dict[str, Any]] = {}
    for label in labels:
        rows[label] = {
            "wall_s": [round(s, 1) for s in seconds[label]],
            "median_wall_s": round(statistics.median(seconds[label]), 1),
            "ndcg_at_10": ndcgs[label][0],
            "ndcg_at_10_per_round": ndcgs[label],
        }
        if len(set(ndcgs[label])) > 1:
            print(f"note: {label} scored differently across rounds: {ndcgs[label]}")
    first = rows[labels[0]]["median_wall_s"]
    print(f"\n| pipeline | median wall s | wall s per round | nDCG@10 | median time / {labels[0]} |")
    print("| --- | --- | --- | --- | --- |")
    for label, row in rows.items():
        per_round = ", ".join(str(s) for s in row["wall_s"])
        ratio = row["median_wall_s"] / first
        print(f"| {label} | {row['median_wall_s']} | {per_round} | {row['ndcg_at_10']:.4f} | {ratio:.2f} |")
    result = {
        "rows": rows,
        "rounds": args.rounds,
        "round_orders": orders,
        "mteb_data": args.mteb_data if "mteb" in peers else None,
        "threads": args.threads,
        "machine": platform.processor() or platform.machine(),
    }
    write_json(Path(args.output) / "result.json", result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
