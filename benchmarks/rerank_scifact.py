"""Train a cross-encoder on SciFact train (a dev set carved out) and rerank three first stages on SciFact test.

    python benchmarks/rerank_scifact.py [--output runs/rerank_scifact] [--toy]

Steps, each timed and recorded in ``OUTPUT/result.json`` (a finished step is not redone on a rerun):
1. mine hard negatives for the train queries with the default model (ranks 10-100, relative margin 0.05);
2. train a cross-encoder from the default model's encoder (``embedkit train --objective cross-encoder``, BCE),
   10 % of the train queries carved out as a dev set; the checkpoint best by dev nDCG@10 is kept;
3. retrieve the test queries' top 1000 with dense (the default model), BM25 (bm25s) and hybrid (RRF);
4. rerank each run's top ``--depth`` with the cross-encoder (one scorer: a pair shared by two runs is scored once)
   and score every run before and after with embedkit's metrics.
5. choose ``first_stage_weight`` (w: ``(1 - w) min-max(logit) + w min-max(first-stage score)``) for each first
   stage on the reranker's own dev queries (their top 1000 from the same retrievers, w in 0, 0.1, ..., 1), then
   rerank the test runs with the chosen w.
Test queries are used for nothing but the final scores. The criterion, fixed before the run: the reranker must
raise the dense first stage's nDCG@10; what it does to BM25 and hybrid is recorded whichever way it falls.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from embedkit import compute_metrics, load_dataset, load_model
from embedkit.reranking import RerankSettings
from embedkit.reranking.reranker import CrossEncoderReranker, rerank_run
from embedkit.search import Dense, DenseRetrieval, bm25_searcher, fuse
from embedkit.train import MiningSettings, TrainConfig, mine_hard_negatives, train, write_mined

METRICS = ("ndcg_at_10", "recall_at_100", "mrr_at_10")
WEIGHTS = [round(0.1 * i, 1) for i in range(11)]


def toy_dataset(output: Path) -> Path:
    """A small slice of SciFact (for a quick check of the script, not for numbers)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from conftest import write_scifact_slice

    return write_scifact_slice(output / "toy-data", load_dataset("scifact"), {"train": 60, "test": 20}, 400, 400)


class Steps:
    """Results by step name in ``result.json``; a finished step is read back instead of rerun."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.results = json.loads(path.read_text()) if path.is_file() else {}

    def run(self, name: str, work):
        if name not in self.results:
            start = time.perf_counter()
            value = work()
            self.results[name] = {**value, "seconds": round(time.perf_counter() - start, 1)}
            self.path.write_text(json.dumps(self.results, indent=2))
        return self.results[name]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="runs/rerank_scifact")
    parser.add_argument("--negatives", type=int, default=4)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--loss", default="bce")
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--toy", action="store_true")
    args = parser.parse_args()
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    steps = Steps(output / "result.json")
    dataset = toy_dataset(output) if args.toy else Path("scifact")
    data = load_dataset(dataset)
    base = load_model(max_length=64 if args.toy else None)
    cache = output / "cache"
    mined_path = output / "mined.jsonl"
    mining = MiningSettings(split="train", num_negatives=args.negatives)

    def mine() -> dict:
        records = mine_hard_negatives(base, data, mining, cache_dir=cache)
        write_mined(mined_path, records, base, data, mining, overwrite=True)
        return {"examples": len(records), "settings": mining.__dict__}

    steps.run("mine", mine)
    config = TrainConfig(
        output=str(output / "reranker"),
        objective="cross-encoder",
        loss=args.loss,
        data=str(mined_path),
        dataset=str(dataset),
        num_negatives=args.negatives,
        drop_short_examples=True,
        max_length=64 if args.toy else args.max_length,
        epochs=args.epochs,
        max_steps=4 if args.toy else -1,
        learning_rate=args.learning_rate,
        dev_fraction=0.1,
        dev_dtype=args.dtype,
        eval_steps=2 if args.toy else 60,
        save_total_limit=1,
        resume=None,
    )

    def fit() -> dict:
        folder = train(config)
        record = json.loads((folder / "embedkit_training.json").read_text())
        keep = ("steps", "train_seconds", "training_rows", "dev_curve", "best_checkpoint", "loss", "examples")
        return {key: record[key] for key in keep} | {"config": record["config"]}

    steps.run("train_reranker", fit)
    queries, qrels = data.split_queries("test"), data.qrels("test")

    lexical = None

    def retrieve(queries: dict[str, str]) -> dict:
        nonlocal lexical
        lexical = lexical or bm25_searcher(data)  # indexed once for test and dev queries
        dense = DenseRetrieval(base, Dense(), cache).search(data, queries, 1000)
        bm25 = lexical.search(queries, 1000)
        return {"dense": dense, "bm25": bm25, "hybrid": fuse([dense, bm25], "rrf", k=1000)}

    runs = steps.run("first_stages", lambda: {"runs": retrieve(queries)})["runs"]
    settings = RerankSettings(str(output / "reranker"), args.depth, max_length=config.max_length, dtype=args.dtype)
    reranker = None
    for name, run in runs.items():

        def rerank_one(run=run) -> dict:
            nonlocal reranker
            reranker = reranker or CrossEncoderReranker(settings)
            before = reranker.pairs_scored
            reranked = rerank_run(reranker, run, data)
            return {
                "before": {m: compute_metrics(qrels, run)[0][m] for m in METRICS},
                "after": {m: compute_metrics(qrels, reranked)[0][m] for m in METRICS},
                "pairs_scored": reranker.pairs_scored - before,
                "reranker": reranker.describe(),
            }

        steps.run(f"rerank_{name}", rerank_one)

    def interpolate() -> dict:
        """w per first stage, chosen on the reranker's dev queries; then the test runs reranked with it."""
        nonlocal reranker
        reranker = reranker or CrossEncoderReranker(settings)
        record = json.loads((output / "reranker" / "embedkit_training.json").read_text())
        dev_ids = set(record["dev_queries"])
        dev_qrels = {q: judged for q, judged in data.qrels("train").items() if q in dev_ids}
        dev_runs = retrieve({q: data.queries[q] for q in sorted(dev_ids)})
        chosen = {}
        for name, run in dev_runs.items():
            curve = {}
            for weight in WEIGHTS:
                reranker.settings = replace(settings, first_stage_weight=weight)
                curve[str(weight)] = compute_metrics(dev_qrels, rerank_run(reranker, run, data))[0]["ndcg_at_10"]
            best = max(WEIGHTS, key=lambda w: curve[str(w)])
            reranker.settings = replace(settings, first_stage_weight=best)
            after = compute_metrics(qrels, rerank_run(reranker, runs[name], data))[0]
            chosen[name] = {
                "dev_curve": curve,
                "weight": best,
                "dev_first_stage": compute_metrics(dev_qrels, run)[0]["ndcg_at_10"],
                "before": steps.results[f"rerank_{name}"]["before"],
                "after": {m: after[m] for m in METRICS},
            }
        return {"stages": chosen, "dev_queries": len(dev_ids), "pairs_scored": reranker.pairs_scored}

    steps.run("first_stage_weight", interpolate)
    print(table(steps.results))


def table(results: dict) -> str:
    lines = [
        "| first stage | nDCG@10 before | after | change | recall@100 before | after | pairs scored | rerank s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in ("dense", "bm25", "hybrid"):
        row = results.get(f"rerank_{name}")
        if row is None:
            continue
        before, after = row["before"], row["after"]
        lines.append(
            f"| {name} | {before['ndcg_at_10']:.4f} | {after['ndcg_at_10']:.4f} | "
            f"{after['ndcg_at_10'] - before['ndcg_at_10']:+.4f} | {before['recall_at_100']:.4f} | "
            f"{after['recall_at_100']:.4f} | {row['pairs_scored']} | {row['seconds']:.0f} |"
        )
    fused = results.get("first_stage_weight", {}).get("stages", {})
    if fused:
        lines += ["", "| first stage | w chosen on dev | dev nDCG@10 at w | test before | test after | change |"]
        lines.append("| --- | --- | --- | --- | --- | --- |")
    for name, row in fused.items():
        before, after = row["before"]["ndcg_at_10"], row["after"]["ndcg_at_10"]
        dev = row["dev_curve"][str(row["weight"])]
        lines.append(f"| {name} | {row['weight']} | {dev:.4f} | {before:.4f} | {after:.4f} | {after - before:+.4f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
