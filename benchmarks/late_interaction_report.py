"""The tables of ``late_interaction_scifact.py``'s JSON, as RESULTS.md shows them (``python
benchmarks/late_interaction_scifact.py --table``)."""

from __future__ import annotations

from sparse_report import compare_table  # the same paired-test table

TRANSFER = ("cranfield", "cisi", "medline", "cacm", "npl", "lisa")
ARMS = ("bm25", "dense", "colbert", "colbert+pool2", "xtr", "rerank:bm25", "rerank:dense")


def _cell(value: float | None, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def scores_table(results: dict) -> str:
    lines = ["| arm | dev nDCG@10 | dev R@100 | test nDCG@10 | test R@100 | transfer mean | doc tokens | bytes/doc |",
             "| --- " * 8 + "|"]  # fmt: skip
    for name in ARMS:
        if name not in results:
            continue
        row = results[name]
        late = row.get("retrieval", {}).get("late_interaction", {}).get("document_tokens", {})
        cells = [name, _cell(row["dev_ndcg_at_10"]), _cell(row["dev_recall_at_100"]), _cell(row["test_ndcg_at_10"]),
                 _cell(row["test_recall_at_100"]), _cell(row.get("transfer", {}).get("mean")),
                 _cell(late.get("mean"), 1), _cell(late.get("bytes_per_row"), 0)]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def training_table(results: dict) -> str:
    lines = ["| model | steps | train s | first loss | last loss |", "| --- " * 5 + "|"]
    for name in ("colbert", "xtr"):
        row = results.get(f"train:{name}")
        if row:
            losses = row.get("loss_history") or [None]
            lines.append(f"| {name} | {row['steps']} | {_cell(row['train_seconds'], 0)} | {_cell(losses[0])} | "
                         f"{_cell(losses[-1])} |")  # fmt: skip
    return "\n".join(lines)


def transfer_table(results: dict) -> str:
    lines = ["| arm | " + " | ".join(TRANSFER) + " | mean |", "| --- " * (len(TRANSFER) + 2) + "|"]
    for name in ARMS:
        scores = results.get(name, {}).get("transfer")
        if scores:
            lines.append(f"| {name} | " + " | ".join(f"{scores[c]:.4f}" for c in (*TRANSFER, "mean")) + " |")
    return "\n".join(lines)


def costs_table(results: dict) -> str:
    costs = results.get("costs")
    if not costs:
        return "costs not measured yet"
    mb = 1 << 20
    lines = ["| index | bytes/doc | stored MB | build s | q/s | R@10 vs exact |", "| --- " * 6 + "|"]
    for label in ("late", "late+pool2"):
        row = costs[label]
        tokens = row["document_tokens"]
        lines.append(f"| {label} exact MaxSim | {tokens['bytes_per_row']:.0f} | {row['embeddings_bytes'] / mb:.1f} | "
                     f"{row['exact_build_s']:.1f} | {row['exact_search_per_s']:.1f} | 1 |")  # fmt: skip
        for ivf in row["ivf"]:
            lines.append(f"| {label} IVF{row['ivf_lists']} nprobe {ivf['nprobe']}, candidates {ivf['candidates']} | "
                         f" | | {row['ivf_build_s']:.1f} | {ivf['search_per_s']:.1f} | "
                         f"{ivf['recall_at_10_vs_exact']:.3f} |")  # fmt: skip
    dense = costs.get("dense")
    if dense:
        lines.append(f"| dense Flat | {dense['bytes_per_document']} | {dense['embeddings_bytes'] / mb:.1f} | "
                     f"{dense['flat_build_s']:.2f} | {dense['flat_search_per_s']:.0f} | |")  # fmt: skip
    agreement = costs["late"].get("library_agreement")
    if agreement:
        lines.append(f"\nsentence-transformers' maxsim re-ranking embedkit's top 30: same top-10 order for "
                     f"{agreement['same_top10_order']}/{agreement['queries']} queries.")  # fmt: skip
    return "\n".join(lines)


def tables(results: dict) -> str:
    parts = [scores_table(results), training_table(results), transfer_table(results), compare_table(results),
             costs_table(results)]  # fmt: skip
    if "choices" in results:
        parts.append(f"Chosen on dev: {results['choices']}")
    return "\n\n".join(parts)
