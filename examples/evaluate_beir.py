"""Evaluate the packaged model on a BEIR folder and write a report folder (json, md, html, TREC run).

python examples/evaluate_beir.py --dataset scifact --output runs
"""

from __future__ import annotations

import argparse
from pathlib import Path

import embedkit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="scifact", help="BEIR folder or name")
    parser.add_argument("--output", type=Path, default=Path("runs"))
    parser.add_argument("--cache-dir", type=Path, default=None, help="where corpus embeddings are cached")
    args = parser.parse_args()

    report = embedkit.evaluate(None, args.dataset, split="test", output=args.output, cache_dir=args.cache_dir)
    for metric in ("ndcg_at_10", "recall_at_100", "mrr_at_10"):
        print(f"{metric} = {report['metrics'][metric]:.4f}")
    print(f"report: {report['folder']}/report.html")


if __name__ == "__main__":
    main()
