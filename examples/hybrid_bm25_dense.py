"""BM25, dense and their fusion on one BEIR folder: fusion usually beats both.

python examples/hybrid_bm25_dense.py --dataset scifact
"""

from __future__ import annotations

import argparse
from pathlib import Path

import embedkit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="scifact", help="BEIR folder or name")
    parser.add_argument("--bm25-backend", default="bm25s", choices=["bm25s", "pyserini"])
    parser.add_argument("--cache-dir", type=Path, default=None, help="where corpus embeddings are cached")
    args = parser.parse_args()

    model = embedkit.load_model()
    data = embedkit.load_dataset(args.dataset)
    bm25 = embedkit.BM25(backend=args.bm25_backend)
    conditions = {
        "dense": embedkit.Dense(),
        "bm25": bm25,
        "hybrid rrf": embedkit.Hybrid(bm25=bm25, fusion=embedkit.Fusion("rrf")),
        "hybrid interpolation": embedkit.Hybrid(bm25=bm25, fusion=embedkit.Fusion("interpolation", [0.5, 0.5])),
    }
    print(f"{'retriever':<22} nDCG@10  R@100")
    for name, retriever in conditions.items():
        report = embedkit.evaluate(model, data, "test", retriever, cache_dir=args.cache_dir)
        metrics = report["metrics"]
        print(f"{name:<22} {metrics['ndcg_at_10']:.4f}   {metrics['recall_at_100']:.4f}")


if __name__ == "__main__":
    main()
