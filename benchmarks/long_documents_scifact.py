"""Long documents on SciFact: truncation (today) against window, sentence and late chunks with MaxP, at 128 and 256
tokens, chosen on dev, with held-out transfer, the fine-tuned model under the chosen arm, encode time and sizes.

    python benchmarks/long_documents_scifact.py --stage arms       # every arm on SciFact dev and test
    python benchmarks/long_documents_scifact.py --stage transfer   # the six classic collections, per arm
    python benchmarks/long_documents_scifact.py --stage finetuned  # the dense fine-tune under the chosen arm
    python benchmarks/long_documents_scifact.py --stage costs      # encode time per arm, idle, on 1,000 documents
    python benchmarks/long_documents_scifact.py --table

Data: the dense fine-tune study's SciFact folder (``benchmarks/finetune_scifact.py``: train qrels split 90/10 into
train and dev, seeded) and its dev-chosen ``epochs-6-dev`` model. The model is the default all-MiniLM-L6-v2 (mean
pooling, normalised). Arms, each at L = 128 and 256 tokens:

- ``truncate@L``: each document's first L tokens (max length L), as every score before this study;
- ``window@L``: chunks of L tokens (special tokens included, no overlap), each encoded alone (max length L);
- ``sentence@L``: whole sentences packed into chunks of at most L tokens (no overlap), each encoded alone;
- ``late@L``: the window spans, pooled from one encode of the whole document read in windows of the model's 512
  positions (a window re-reads the default quarter of its content as context: 127 tokens).

A chunked arm is scored with MaxP, FirstP and SumP (top 3) on dev; its test score is MaxP's (the issue's arm) and
the chosen setting's. The setting to report is the best dev nDCG@10 over every chunked arm and aggregation; test and
the six classic collections choose nothing. Sizes are the embeddings folder's vector files; encode speed is measured
apart (``costs``) on an idle machine (an arm's ``encode_s`` is its whole-corpus encode, which ran beside other
work). The criteria are fixed in RESULTS.md ("Long documents") before any arm ran.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch
from long_documents_report import AGGREGATIONS, ARMS, LENGTHS, METHODS, TRANSFER, tables, verdicts

from embedkit import EmbeddingsFolder, EvaluateOptions, encode_to_folder, evaluate, load_dataset, load_model
from embedkit.encode.cache import cached_corpus_embeddings
from embedkit.evaluation.compare import compare_runs
from embedkit.models.chunking import Chunking
from embedkit.search import Dense

BEIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "beir"
POSITIONS = 512  # the default model's position table: how far a late encode reads at once
COST_DOCUMENTS = 1000


def arm_model(arm: str, model_path: str | Path | None = None):
    """The model an arm encodes with: its max length and chunking."""
    method, length = arm.split("@")
    length = int(length)
    if method == "truncate":
        return load_model(model_path, max_length=length)
    max_length = POSITIONS if method == "late" else length
    return load_model(model_path, max_length=max_length, chunking=Chunking(method, size=length))


def spec_of(arm: str, aggregation: str) -> Dense:
    if arm.startswith("truncate"):
        return Dense()
    return Dense(aggregation=aggregation, sum_top=3 if aggregation == "sump" else None)


def metrics_of(report: dict) -> dict[str, float]:
    return {key: report["metrics"][key] for key in ("ndcg_at_10", "recall_at_100")}


def encode_cost(model, data, cache: Path) -> dict:
    """One encode of the corpus into the cache (timed where it encodes; a cache hit records nothing new)."""
    start = time.perf_counter()
    folder = cached_corpus_embeddings(model, data, cache)
    seconds = time.perf_counter() - start
    vector_bytes = sum(path.stat().st_size for path in folder.path.glob("shard-*.npy"))
    cost = {"rows": folder.manifest["count"], "documents": len(data.corpus), "vector_bytes": vector_bytes}
    return cost | ({"encode_s": round(seconds, 1)} if folder.encoded_shards else {})


def score(model, spec: Dense, folder: Path, cache: Path, reports: Path, name: str, splits=("dev", "test")) -> dict:
    row: dict = {}
    for split in splits:
        report = evaluate(
            model, folder, split, spec, output=reports / name, cache_dir=cache, options=EvaluateOptions(overwrite=True)
        )
        row |= {f"{split}_{key}": value for key, value in metrics_of(report).items()}
        row[f"{split}_report"] = report["folder"]
    return row


def arms_stage(results: dict, output: Path, finetune: Path, save) -> None:
    folder, cache, reports = finetune / "scifact-dev", output / "cache", output / "reports"
    data = load_dataset(folder)
    for arm in ARMS:
        if arm in results and "test_report" in results[arm]:
            continue
        model = arm_model(arm)
        row = {"cost": encode_cost(model, data, cache)}
        if arm.startswith("truncate"):
            row |= score(model, Dense(), folder, cache, reports, arm)
        else:
            for aggregation in AGGREGATIONS:
                splits = ("dev", "test") if aggregation == "maxp" else ("dev",)
                scores = score(model, spec_of(arm, aggregation), folder, cache, reports, f"{arm}+{aggregation}", splits)
                row[aggregation] = scores
            row |= {key: value for key, value in row["maxp"].items()}
        results[arm] = row
        save()
        print(arm, row["cost"], {k: v for k, v in row.items() if k.endswith("ndcg_at_10")}, flush=True)
    choices = [(arm, agg) for arm in ARMS if not arm.startswith("truncate") for agg in AGGREGATIONS]
    arm, aggregation = max(choices, key=lambda pair: results[pair[0]][pair[1]]["dev_ndcg_at_10"])
    chosen = results[arm][aggregation]
    if "test_report" not in chosen:
        model = arm_model(arm)
        chosen |= score(model, spec_of(arm, aggregation), folder, cache, reports, f"{arm}+{aggregation}", ("test",))
    results["choice"] = {"arm": arm, "aggregation": aggregation, **chosen}
    pairs = {
        "chosen vs truncate@256": ("truncate@256", chosen["test_report"]),
        **{
            f"{m}@{n} vs truncate@{n}": (f"truncate@{n}", results[f"{m}@{n}"]["test_report"])
            for n in LENGTHS
            for m in METHODS[1:]
        },
        **{
            f"late@{n} vs window@{n}": (results[f"window@{n}"]["test_report"], results[f"late@{n}"]["test_report"])
            for n in LENGTHS
        },
    }
    results["compare"] = {}
    for name, (baseline, other) in pairs.items():
        baseline = results[baseline]["test_report"] if baseline in results else baseline
        results["compare"][name] = compare_runs([baseline, other])["comparisons"][0]["tests"]
    save()


def transfer_stage(results: dict, output: Path, save, only: list[str] | None = None) -> None:
    """MaxP (the issue's aggregation) for every arm, and the chosen aggregation where it differs; the chosen arm and
    ``truncate@256`` first."""
    cache = output / "cache"
    chosen = results["choice"]
    first = [chosen["arm"], "truncate@256"]  # what criterion 4 compares, before the descriptive rest
    for arm in dict.fromkeys([*first, *ARMS]):
        if "transfer" in results[arm] or (only and arm not in only):
            continue
        model = arm_model(arm)
        aggregations = ["maxp"]
        if arm == chosen["arm"] and chosen["aggregation"] != "maxp":
            aggregations.append(chosen["aggregation"])
        row = {}
        for aggregation in dict.fromkeys(aggregations):
            spec = spec_of(arm, aggregation)
            scores = {c: evaluate(model, BEIR / c, "test", spec, cache_dir=cache)["metrics"]["ndcg_at_10"]
                      for c in TRANSFER}  # fmt: skip
            row[aggregation] = {**scores, "mean": float(np.mean(list(scores.values())))}
        results[arm]["transfer"] = row["maxp"]
        if len(row) > 1:
            results["choice"]["transfer"] = row[chosen["aggregation"]]
        elif arm == chosen["arm"]:
            results["choice"]["transfer"] = row["maxp"]
        save()
        print(arm, "transfer", results[arm]["transfer"]["mean"], flush=True)


def finetuned_stage(results: dict, output: Path, finetune: Path, save) -> None:
    """The fine-tuned model (``epochs-6-dev``) under the chosen arm, against its truncation at 256."""
    recorded = json.loads((finetune / "result.json").read_text())["epochs-6-dev"]
    chosen = results["choice"]
    folder, cache, reports = finetune / "scifact-dev", output / "cache", output / "reports"
    model = arm_model(chosen["arm"], finetune / "models" / "epochs-6-dev")
    spec = spec_of(chosen["arm"], chosen["aggregation"])
    row = {"cost": encode_cost(model, load_dataset(folder), cache)}
    row |= score(model, spec, folder, cache, reports, f"finetuned:{chosen['arm']}+{chosen['aggregation']}")
    row["truncate@256"] = {key: recorded[key] for key in ("dev_ndcg_at_10", "test_ndcg_at_10", "test_report")}
    row["compare"] = compare_runs([recorded["test_report"], row["test_report"]])["comparisons"][0]["tests"]
    results["finetuned"] = row
    save()
    print("finetuned", row["dev_ndcg_at_10"], row["test_ndcg_at_10"], flush=True)


def costs_stage(results: dict, output: Path, finetune: Path, save) -> None:
    """Encode time per arm on an idle machine: the first ``COST_DOCUMENTS`` SciFact documents into a fresh folder,
    the arms alternated in one process, two rounds, the faster kept (the arms' whole-corpus encodes ran beside
    other work, so their seconds are not compared)."""
    corpus = load_dataset(finetune / "scifact-dev").corpus.select(range(COST_DOCUMENTS))
    models = {arm: arm_model(arm) for arm in ARMS}
    seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for _ in range(2):
        for arm in ARMS:
            folder = output / "cost-encodes" / arm
            shutil.rmtree(folder, ignore_errors=True)
            start = time.perf_counter()
            encode_to_folder(models[arm], corpus, folder, show_progress=False)
            seconds[arm].append(time.perf_counter() - start)
    results["costs"] = {"documents": COST_DOCUMENTS, "threads": torch.get_num_threads()}
    for arm in ARMS:
        rows = EmbeddingsFolder.open(output / "cost-encodes" / arm).manifest["count"]
        best = min(seconds[arm])
        results["costs"][arm] = {"seconds": round(best, 1), "documents_per_s": round(COST_DOCUMENTS / best, 1),
                                 "rows": rows, "rounds": [round(value, 1) for value in seconds[arm]]}  # fmt: skip
    shutil.rmtree(output / "cost-encodes", ignore_errors=True)
    save()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="runs/long")
    parser.add_argument("--finetune", default="runs/finetune", help="the dense fine-tune study's output folder")
    parser.add_argument("--stage", choices=["arms", "transfer", "finetuned", "costs"], action="append", default=[])
    parser.add_argument("--transfer-arms", help="comma-separated arms for the transfer stage (default: all)")
    parser.add_argument("--table", action="store_true")
    args = parser.parse_args()
    output, finetune = Path(args.output), Path(args.finetune)
    output.mkdir(parents=True, exist_ok=True)
    path = output / "result.json"
    results = json.loads(path.read_text()) if path.is_file() else {}

    def save() -> None:
        results["verdicts"] = verdicts(results)
        path.write_text(json.dumps(results, indent=2))

    if "arms" in args.stage:
        arms_stage(results, output, finetune, save)
    if "transfer" in args.stage:
        transfer_stage(results, output, save, args.transfer_arms.split(",") if args.transfer_arms else None)
    if "finetuned" in args.stage:
        finetuned_stage(results, output, finetune, save)
    if "costs" in args.stage:
        costs_stage(results, output, finetune, save)
    print(tables(results))


if __name__ == "__main__":
    main()
