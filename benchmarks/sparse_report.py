"""The tables of ``sparse_scifact.py``'s JSON, as RESULTS.md shows them (``python benchmarks/sparse_scifact.py
--table``)."""

from __future__ import annotations

TRANSFER = ("cranfield", "cisi", "medline", "cacm", "npl", "lisa")
MODELS = ("bm25", "dense", "splade", "splade-inference-free", "csr")
HYBRIDS = ("bm25+dense", "bm25+splade", "dense+splade", "bm25+dense+splade")


def _row(name: str, row: dict) -> str:
    nnz = row.get("nnz", {})
    documents = nnz.get("document_nnz", {}).get("mean")
    queries = nnz.get("query_nnz", {}).get("mean")
    uncapped = row.get("uncapped_document_nnz_first_200", {}).get("mean")
    cells = [
        name,
        f"{row['dev_ndcg_at_10']:.4f}",
        f"{row['test_ndcg_at_10']:.4f}",
        f"{row['test_recall_at_100']:.4f}",
        f"{row['transfer']['mean']:.4f}",
        "" if documents is None else f"{documents:.0f}",
        "" if uncapped is None else f"{uncapped:.0f}",
        "" if queries is None else f"{queries:.0f}",
        "" if "train_seconds_recorded" not in row else f"{row['train_seconds_recorded']:.0f}",
    ]
    return "| " + " | ".join(cells) + " |"


def scores_table(results: dict) -> str:
    head = "| retriever | dev nDCG@10 | test nDCG@10 | test R@100 | transfer mean | doc nnz | uncapped doc nnz |"
    lines = [head + " query nnz | train s |", "| --- " * 9 + "|"]
    lines += [_row(name, results[name]) for name in MODELS if name in results]
    lines += [_row(f"RRF {name}", results[f"hybrid:{name}"]) for name in HYBRIDS if f"hybrid:{name}" in results]
    return "\n".join(lines)


def transfer_table(results: dict) -> str:
    names = [name for name in MODELS if name in results]
    names += [f"hybrid:{name}" for name in HYBRIDS if f"hybrid:{name}" in results]
    lines = ["| retriever | " + " | ".join(TRANSFER) + " | mean |", "| --- " * (len(TRANSFER) + 2) + "|"]
    for name in names:
        scores = results[name]["transfer"]
        cells = [f"{scores[c]:.4f}" for c in (*TRANSFER, "mean")]
        lines.append(f"| {name.removeprefix('hybrid:')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def compare_table(results: dict) -> str:
    lines = ["| A | B | B - A | p | 95 % CI | wins / losses |", "| --- | --- | --- | --- | --- | --- |"]
    for pair, tests in results.get("compare", {}).items():
        a, b = (name.removeprefix("hybrid:") for name in pair.split(" vs "))
        t = tests["ndcg_at_10"]
        lines.append(
            f"| {a} | {b} | {t['delta']:+.4f} | {t['randomization_p_value']:.4f} | "
            f"[{t['bootstrap_ci_low']:+.4f}, {t['bootstrap_ci_high']:+.4f}] | {t['wins']} / {t['losses']} |"
        )
    return "\n".join(lines)


def costs_table(results: dict) -> str:
    costs = results.get("costs")
    if not costs:
        return "costs not measured yet"
    mb = 1 << 20
    lines = [
        "| model | doc nnz | query nnz | vectors MB | impact MB | Seismic MB | exact q/s | impact q/s | Seismic q/s |"
        " impact = exact of quantised | impact = pyserini by hand | impact = exact (set) | Seismic R@10 vs exact |",
        "| --- " * 13 + "|",
    ]
    for name in ("splade", "splade-inference-free", "csr"):
        row = costs[name]
        agreement, n = row["impact_agreement"], row["queries"]
        lines.append(
            f"| {name} | {row['document_nnz']['mean']:.0f} | {row['query_nnz']['mean']:.0f} | "
            f"{row['embeddings_bytes'] / mb:.1f} | {row['impact_index_bytes'] / mb:.1f} | "
            f"{row['seismic_index_bytes'] / mb:.1f} | {row['exact_search_per_s']:.0f} | "
            f"{row['impact_search_per_s']:.0f} | {row['seismic_search_per_s']:.0f} | "
            f"{agreement['equal_to_exact_of_quantised']}/{n} | {agreement['equal_to_pyserini_by_hand']}/{n} | "
            f"{row['impact_top10_same_set']}/{n} | {row['seismic_recall_at_10_vs_exact']:.3f} |"
        )
    bm25 = costs["bm25"]
    lines.append(f"\nBM25 (pyserini Lucene, one thread): {bm25['search_per_s']:.0f} queries/s, index "
                 f"{bm25['index_bytes'] / mb:.1f} MB.")  # fmt: skip
    return "\n".join(lines)


def tables(results: dict) -> str:
    parts = [scores_table(results), transfer_table(results), compare_table(results), costs_table(results)]
    if "choices" in results:
        parts.append(f"Chosen on dev: {results['choices']}")
    return "\n\n".join(parts)
