"""Retrieval metrics from pytrec_eval, keyed the MTEB way (``ndcg_at_10``), averaged the BEIR/MTEB way."""

from __future__ import annotations

import pytrec_eval

from embedkit.data.trec import ranked
from embedkit.errors import EmbedkitError
from embedkit.protocols import Qrels, Run
from embedkit.validation import check_sequence, check_whole

# pytrec_eval measure -> (cut-offs, MTEB key prefix)
MEASURES = {
    "ndcg_cut": ((1, 3, 5, 10, 100), "ndcg_at"),
    "map_cut": ((100,), "map_at"),
    "recall": ((10, 100, 1000), "recall_at"),
    "P": ((10,), "precision_at"),
}
MRR_CUTOFFS = (10,)
METRIC_NAMES = [f"{prefix}_{k}" for cuts, prefix in MEASURES.values() for k in cuts] + [
    f"mrr_at_{k}" for k in MRR_CUTOFFS
]


# trec_eval crashes the process on a cut-off of 0 and wraps one above 2**63; a cut-off above any corpus is useless.
MAX_CUTOFF = 1_000_000_000


def check_cutoffs(cutoffs: object, field: str = "cutoffs") -> tuple[int, ...]:
    """Metric cut-offs as whole numbers in [1, MAX_CUTOFF], checked before pytrec_eval sees them."""
    checked = []
    for i, cutoff in enumerate(check_sequence(cutoffs, field)):
        checked.append(check_whole(cutoff, f"{field}[{i}]", minimum=1, maximum=MAX_CUTOFF))
    if not checked:
        raise EmbedkitError("give at least one cut-off", field=field)
    return tuple(checked)


def reciprocal_rank(relevant: set[str], hits: dict[str, float], cutoff: int) -> float:
    """1/rank of the first relevant hit in the top ``cutoff`` (ties broken by doc id descending, as pytrec_eval)."""
    (cutoff,) = check_cutoffs([cutoff], "cutoff")
    for rank, (doc_id, _) in enumerate(ranked(hits)[:cutoff], start=1):
        if doc_id in relevant:
            return 1.0 / rank
    return 0.0


def compute_metrics(qrels: Qrels, run: Run) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Mean and per-query metrics over the judged queries that have results (BEIR's and MTEB's convention)."""
    measures = {f"{name}.{','.join(map(str, cuts))}" for name, (cuts, _) in MEASURES.items()}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, measures)
    raw = evaluator.evaluate(run)
    per_query: dict[str, dict[str, float]] = {}
    for query_id, scores in raw.items():
        row = {f"{prefix}_{k}": scores[f"{name}_{k}"] for name, (cuts, prefix) in MEASURES.items() for k in cuts}
        relevant = {doc for doc, grade in qrels[query_id].items() if grade > 0}
        for k in MRR_CUTOFFS:
            row[f"mrr_at_{k}"] = reciprocal_rank(relevant, run[query_id], k)
        per_query[query_id] = row
    count = max(1, len(per_query))
    means = {name: sum(row[name] for row in per_query.values()) / count for name in METRIC_NAMES}
    return means, per_query


RECALL_CURVE_CUTOFFS = (1, 2, 3, 5, 10, 20, 30, 50, 100, 200, 300, 500, 1000)


def recall_curve(qrels: Qrels, run: Run, cutoffs: tuple[int, ...] = RECALL_CURVE_CUTOFFS) -> dict[str, float]:
    """Mean recall@k at each cut-off (keys are k as strings, for JSON), averaged like :func:`compute_metrics`."""
    cutoffs = check_cutoffs(cutoffs)
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {f"recall.{','.join(map(str, cutoffs))}"})
    raw = evaluator.evaluate(run)
    count = max(1, len(raw))
    return {str(k): sum(scores[f"recall_{k}"] for scores in raw.values()) / count for k in cutoffs}
