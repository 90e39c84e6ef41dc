"""Two runs, one question: is the difference real? Paired t-test, randomisation test, bootstrap CI.

python examples/compare_runs.py --dataset scifact --output runs
"""

from __future__ import annotations

import argparse
from pathlib import Path

import embedkit
from embedkit.evaluation.compare import compare_runs
from embedkit.report.markdown import render_comparison_markdown
from embedkit.report.writer import write_comparison


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="scifact", help="BEIR folder or name")
    parser.add_argument("--output", type=Path, default=Path("runs"))
    parser.add_argument("--cache-dir", type=Path, default=None, help="where corpus embeddings are cached")
    args = parser.parse_args()

    data = embedkit.load_dataset(args.dataset)
    bm25 = embedkit.evaluate(None, data, output=args.output, retriever="bm25")
    dense = embedkit.evaluate(None, data, output=args.output, cache_dir=args.cache_dir)
    # Same as: embedkit compare RUN_A RUN_B --output runs/compare
    result = compare_runs([bm25["folder"], dense["folder"]], ["ndcg_at_10", "recall_at_100"])
    print(render_comparison_markdown(result))
    print(f"report: {write_comparison(args.output / 'compare', result)}/report.html")


if __name__ == "__main__":
    main()
