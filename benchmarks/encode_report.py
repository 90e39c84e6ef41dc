"""What ``encode.py`` reports beyond texts/s: cosines between rows, nDCG@10 on the test split, and the table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from sentence_transformers.util import pairwise_cos_sim

from embedkit.data import doc_text


def cosine_stats(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Min and mean cosine of each row of ``a`` to the same row of ``b`` (sentence-transformers' pairwise_cos_sim)."""
    values = pairwise_cos_sim(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    return {"min": round(float(values.min()), 6), "mean": round(float(values.mean()), 6)}


def ndcg_on_test(
    encode: Callable[[list[str]], np.ndarray], model: Any, data: Any, corpus_embeddings: np.ndarray | None
) -> dict[str, float]:
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


def print_table(results: dict[str, dict[str, Any]]) -> None:
    """One markdown row per encoder: precision, texts/s, its ratio to each peer row, cosines, nDCG@10."""
    peers = list(dict.fromkeys(peer for row in results.values() for peer in row["ratio_to"]))
    print(
        "| encoder | precision | texts/s (median) | "
        + " | ".join(f"x {peer}" for peer in peers)
        + " | min cos vs ST fp32 | min cos vs ST same precision | nDCG@10 |"
    )
    print("| --- " * (6 + len(peers)) + "|")
    for name, row in results.items():
        cos, same = row.get("cosine_vs_st_fp32", {}), row.get("cosine_vs_st_same_precision", {})
        cells = [
            f"{name} (batch {row['st_batch_size']})" if "st_batch_size" in row else name,
            row["precision"],
            f"{row['median_docs_per_s']:.1f}",
            *(f"{row['ratio_to'][peer]:.2f}" if peer in row["ratio_to"] else "" for peer in peers),
            f"{cos['min']:.6f}" if cos else "",
            f"{same['min']:.6f}" if same else "",
            f"{row['ndcg_at_10']:.4f}" if "ndcg_at_10" in row else "",
        ]
        print("| " + " | ".join(cells) + " |")
