"""What ``encode.py`` reports beyond docs/s: the work in its texts (tokens, FLOPs of the forward), the device's own
matmul peak measured in the same process, the table, and the speed-vs-nDCG@10 picture. ``encode_profile.py`` counts
FLOPs and peaks with the same functions."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sentence_transformers.util import pairwise_cos_sim

from embedkit.data import doc_text


def matmul_peak(dtype: torch.dtype, device: str = "cpu", size: int | None = None, repeats: int = 5) -> float:
    """GFLOP/s of ``torch.mm`` on large square matrices: the device's practical peak for this precision (and, on a
    CPU, this process's threads). Best of ``repeats`` after a warm-up; a GPU is synchronised around each product and
    gets 16384-wide matrices (4096-wide ones take well under a millisecond there, too short to time alone)."""
    on_gpu = torch.device(device).type == "cuda"
    size = size or (16384 if on_gpu else 4096)
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    torch.mm(a, b)  # warm-up: the kernel choice and the memory are paid here
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        sync()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def forward_flops(config: Any, batch: int, length: int) -> float:
    """Multiply-adds x 2 of a BERT-like encoder's forward over ``batch`` sequences padded to ``length``."""
    d, ff, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    per_layer = 8 * length * d * d + 4 * length * d * ff + 4 * length * length * d
    return float(batch * layers * per_layer)


def text_work(texts: list[str], tokenizer: Any, config: Any, max_length: int) -> dict[str, float]:
    """Tokens of ``texts`` as the model sees them (truncated, special tokens counted) and the FLOPs of their forward
    with no padding: the useful work, the same for every encoder whatever its batching pads."""
    lengths = np.fromiter(
        (len(ids) for ids in tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]), dtype=np.int64
    )
    return {"tokens": float(lengths.sum()), "flops": sum(forward_flops(config, 1, int(n)) for n in lengths)}


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
    """One markdown row per encoder: speed, ratios, cosines, useful tokens/s and GFLOP/s against the peak, RSS,
    nDCG@10."""
    print(
        "| encoder | precision | docs/s (median) | ratio vs ST same precision | ratio vs ST fp32 | min cos vs ST fp32 "
        "| mean cos vs ST fp32 | min cos vs ST bf16 | mean cos vs ST bf16 | tokens/s | of matmul peak | peak RSS MB "
        "| nDCG@10 |"
    )
    print("| --- " * 13 + "|")
    for name, row in results.items():
        cos, cos_bf16 = row.get("cosine_vs_st_fp32", {}), row.get("cosine_vs_st_bf16", {})
        rss = (row.get("rss") or {}).get("peak_rss_mb", "")
        cells = [
            f"{name} (batch {row['st_batch_size']})" if "st_batch_size" in row else name,
            row["precision"],
            f"{row['median_docs_per_s']:.1f}",
            f"{row['ratio_vs_st_same_precision']:.2f}" if "ratio_vs_st_same_precision" in row else "",
            f"{row['ratio_vs_st_fp32']:.2f}" if "ratio_vs_st_fp32" in row else "",
            f"{cos['min']:.6f}" if cos else "",
            f"{cos['mean']:.6f}" if cos else "",
            f"{cos_bf16['min']:.6f}" if cos_bf16 else "",
            f"{cos_bf16['mean']:.6f}" if cos_bf16 else "",
            f"{row['tokens_per_s']:.0f}" if "tokens_per_s" in row else "",
            f"{row['fraction_of_matmul_peak']:.1%}" if "fraction_of_matmul_peak" in row else "",
            str(rss),
            f"{row['ndcg_at_10']:.4f}" if "ndcg_at_10" in row else "",
        ]
        print("| " + " | ".join(cells) + " |")


def plot_speed_vs_ndcg(results: dict[str, dict[str, Any]], title: str, path: Path) -> None:
    """One point per encoder that has an nDCG@10: median docs/s (log scale) against nDCG@10."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = {name: row for name, row in results.items() if "ndcg_at_10" in row}
    figure, axes = plt.subplots(figsize=(7.5, 4.5))
    for name, row in points.items():
        marker = "s" if name.startswith("sentence-transformers") else "o"
        label = f"{name}: {row['median_docs_per_s']:.1f} docs/s, nDCG@10 {row['ndcg_at_10']:.4f}"
        axes.scatter(row["median_docs_per_s"], row["ndcg_at_10"], marker=marker, s=45, label=label)
    axes.legend(fontsize=7, loc="center left")
    axes.set_xscale("log")
    axes.set_xlabel("documents per second (median of the timed rounds, log scale)")
    axes.set_ylabel("nDCG@10, SciFact test")
    axes.set_title(title, fontsize=9)
    axes.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
