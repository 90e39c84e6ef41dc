"""Choosing an index by a memory budget: build each candidate that fits (``budget.plan_candidates``) on a sample of
the vectors, sweep its search parameter (``tune.measure_curve``), keep the fastest that meets the target, build it
on all vectors and check it again there. What ``embedkit index --max-memory`` runs.

Measured bytes are the serialized FAISS index (what loading it takes), plus the tables FAISS builds at search time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from embedkit.data.beir import load_dataset
from embedkit.errors import EmbedkitError
from embedkit.index.budget import Candidate, plan_candidates
from embedkit.index.faiss_helpers import BuildSettings, check_model_settings, to_cpu
from embedkit.index.faiss_index import Index
from embedkit.index.rescore import exact_search
from embedkit.index.tune import Target, measure_curve, measure_point
from embedkit.index.vectors import Vectors
from embedkit.models.loading import load_model_from_settings
from embedkit.storage import format_size

# A run (query id -> doc id -> score) to its nDCG@10 on the tuning queries' qrels; given by a caller that can
# import the evaluation stage (the index stage may not).
RunScore = Callable[[dict[str, dict[str, float]]], float]


@dataclass(frozen=True)
class BudgetSettings:
    """The budget and the target: recall@k against exact search, or at most ``ndcg_drop`` below exact search's
    nDCG@10 (needs qrels); candidates are built on ``sample_size`` vectors and swept with ``queries`` of them."""

    max_memory: int
    target_recall: float = 0.95
    ndcg_drop: float | None = None
    sample_size: int = 100_000
    queries: int = 1000
    k: int = 10
    repeats: int = 3
    seed: int = 0

    def describe(self) -> str:
        if self.ndcg_drop is not None:
            return f"nDCG@10 drop <= {self.ndcg_drop}"
        return f"recall@{self.k} >= {self.target_recall}"


@dataclass(frozen=True)
class TuneQueries:
    """Real queries for the sweep: their ids, vectors, where they come from, and qrels when the split has them."""

    ids: list[str]
    vectors: np.ndarray
    source: str
    qrels: dict[str, dict[str, int]] | None = None


def dataset_tune_queries(
    model_settings: dict[str, Any] | None, dataset: str, split: str | None, data_dir: str | Path | None
) -> TuneQueries:
    """A dataset's queries (of ``split``, with its qrels) encoded with the model recorded in the embeddings."""
    if not model_settings:
        raise EmbedkitError("tuning on a dataset's queries needs the model recorded in the embeddings folder")
    data = load_dataset(dataset, data_dir=data_dir)
    texts = data.split_queries(split) if split else data.queries
    if not texts:
        raise EmbedkitError("the dataset has no queries", path=dataset)
    model = load_model_from_settings(model_settings)
    check_model_settings(model_settings, model.settings)  # the queries must be encoded as the documents were
    vectors = model.encode_queries(list(texts.values()))
    source = f"{len(texts)} queries of {data.name}{f' ({split})' if split else ''}"
    return TuneQueries(
        list(texts), np.ascontiguousarray(vectors, dtype=np.float32), source, data.qrels(split) if split else None
    )


def serialized_bytes(index: Index) -> int:
    """Bytes of the index as FAISS writes it, which is what loading it takes."""
    return int(faiss.serialize_index(to_cpu(index.faiss_index)).size)


class _Trial:
    """One sample (its rows, vectors, queries and exact top-k) that every candidate is built and swept on."""

    def __init__(
        self, vectors: Vectors, budget: BudgetSettings, metric: str, queries: TuneQueries | None, score: RunScore | None
    ):
        count = min(len(vectors), budget.sample_size)
        rng = np.random.default_rng(budget.seed)
        rows = rng.choice(len(vectors), count, replace=False) if count < len(vectors) else np.arange(len(vectors))
        if queries is not None and queries.qrels and count < len(vectors):  # judged documents stay in the sample
            judged = {doc for hits in queries.qrels.values() for doc in hits}
            rows = np.union1d(rows, [row for row, doc in enumerate(vectors.ids()) if doc in judged])
        rows = np.sort(rows)
        if queries is None:  # corpus vectors as queries, held out of the sample: a query in the index finds itself,
            # which flatters graphs and cells alike
            held = np.sort(rng.choice(len(rows), min(budget.queries, len(rows) // 10), replace=False))
            self.queries = vectors.gather(rows[held])
            self.source = f"{len(held)} corpus vectors held out of the sample (seed {budget.seed})"
            rows = np.delete(rows, held)
        else:
            self.queries, self.source = queries.vectors, queries.source
        all_ids = vectors.ids() if vectors.part_ids else None  # once: a list of every id, indexed per sampled row
        self.vectors = Vectors.of(vectors.gather(rows), None if all_ids is None else [all_ids[r] for r in rows])
        self.k, self.metric, self.repeats = budget.k, metric, budget.repeats
        self.query_ids = queries.ids if queries is not None else None
        self.target = self.target_for(budget, score, self.vectors)
        self.truth = exact_search(self.queries, self.vectors, self.k, metric)[1]

    def target_for(self, budget: BudgetSettings, score: RunScore | None, vectors: Vectors) -> Target:
        """The target on ``vectors``' rows: recall, or nDCG@10 of the rows' document ids through ``score``."""
        if budget.ndcg_drop is None or score is None or self.query_ids is None:
            return Target(recall=budget.target_recall)
        ids = vectors.ids()

        def ndcg(rows: np.ndarray) -> float:
            return score(
                {
                    q: {ids[j]: float(self.k - r) for r, j in enumerate(row) if j >= 0}
                    for q, row in zip(self.query_ids, rows)
                }
            )

        return Target(quality=ndcg, max_drop=budget.ndcg_drop)

    def sweep(self, index: Index, truth: np.ndarray, target: Target, tunable: bool) -> list[dict[str, Any]]:
        """The curve of a tunable index; one point for ``Flat``."""
        if not tunable:
            reference = target.quality(truth) if target.quality else None
            return [
                {
                    "param": None,
                    "value": None,
                    **measure_point(index, self.queries, truth, self.k, target, reference, self.repeats),
                }
            ]
        return measure_curve(index, self.queries, truth, self.k, target, repeats=self.repeats)


def _best(curve: list[dict[str, Any]]) -> dict[str, Any] | None:
    passing = [point for point in curve if point["met"]]
    return max(passing, key=lambda point: point["qps"]) if passing else None


def _try(candidate: Candidate, trial: _Trial, build: BuildSettings, total: int) -> dict[str, Any]:
    """Build ``candidate`` on the sample, project its measured size to all vectors and, if it fits, sweep it."""
    index = Index.from_vectors(trial.vectors, replace(build, factory=candidate.factory, nprobe=None, ef_search=None))
    sample_bytes = serialized_bytes(index)
    projected = sample_bytes + candidate.tables + int(candidate.per_vector * (total - len(trial.vectors)))
    record = {**candidate.to_meta(), "sample_bytes": sample_bytes, "projected_bytes": projected}
    if projected > candidate.budget:
        return {**record, "fits": False, "met": False, "curve": []}
    curve = trial.sweep(index, trial.truth, trial.target, candidate.tunable)
    best = _best(curve)
    return {**record, "curve": curve, "met": best is not None, "best": best}


def choose_index(
    vectors: Any,
    build: BuildSettings,
    budget: BudgetSettings,
    *,
    queries: TuneQueries | None = None,
    score: RunScore | None = None,
) -> Index:
    """The fastest candidate under ``budget.max_memory`` that meets the target, built on all ``vectors`` with its
    search parameter set; the candidates and the choice are kept in ``meta["memory_budget"]``."""
    vectors = Vectors.open(vectors)
    if budget.ndcg_drop is not None and (queries is None or not queries.qrels or score is None):
        raise EmbedkitError(
            "--target-ndcg-drop needs qrels: give --tune-dataset and --tune-split", field="--target-ndcg-drop"
        )
    total, limit = len(vectors), budget.max_memory
    trained_on = min(build.train_size, budget.sample_size, total)
    if queries is None:  # a tenth of the sample is held out as queries
        trained_on -= min(budget.queries, trained_on // 10)
    plan = plan_candidates(total, vectors.dim, limit, build.metric, trained_on)
    if not any(c.fits for c in plan):
        smallest = min(plan, key=lambda c: c.predicted_bytes)
        raise EmbedkitError(
            f"no index fits {format_size(limit)}: the smallest considered, {smallest.factory}, needs about "
            f"{format_size(smallest.predicted_bytes)} for {total} vectors",
            field="--max-memory",
        )
    trial = _Trial(vectors, budget, build.metric, queries, score)
    records = [_try(c, trial, build, total) if c.fits else {**c.to_meta(), "met": False, "curve": []} for c in plan]
    met = [r for r in records if r["met"]]
    if not met:
        tried = [point for r in records for point in r["curve"]]
        best = max((p["recall_at_k"] for p in tried), default=0.0)
        raise EmbedkitError(
            f"no index under {format_size(limit)} reaches {budget.describe()}: the best recall@{budget.k} reached is "
            f"{best:.4f}; raise --max-memory or lower the target",
            field="--max-memory",
        )
    chosen = max(met, key=lambda r: r["best"]["qps"])
    index = Index.from_vectors(vectors, replace(build, factory=chosen["factory"], nprobe=None, ef_search=None))
    final = _final_sweep(index, vectors, trial, budget, score, chosen)
    measured = serialized_bytes(index) + chosen["tables"]
    if measured > limit:
        raise EmbedkitError(
            f"the chosen '{chosen['factory']}' takes {format_size(measured)} built on all vectors, over "
            f"{format_size(limit)}; lower --max-memory's headroom or raise it",
            field="--max-memory",
        )
    index.meta["memory_budget"] = {
        "max_memory": limit,
        "target": budget.describe(),
        "sample": {"vectors": len(trial.vectors), "queries": trial.source},
        "candidates": records,
        "chosen": chosen["factory"],
        "measured_bytes": measured,
        "final_curve": final,
    }
    return index


def _final_sweep(
    index: Index, vectors: Vectors, trial: _Trial, budget: BudgetSettings, score: RunScore | None, chosen: dict
) -> list[dict[str, Any]]:
    """The chosen index swept again on all vectors (exact top-k over all of them); the setting kept is the larger of
    the sample's and this sweep's fastest that meets the target (corpus-vector queries are in the full index, so this
    sweep alone would flatter it). A sample can flatter an index too: if none meets the target here, that is an error.
    """
    truth = exact_search(trial.queries, vectors, trial.k, trial.metric)[1]
    curve = trial.sweep(index, truth, trial.target_for(budget, score, vectors), chosen["family"] != "flat")
    best = _best(curve)
    if best is None:
        top = max(point["recall_at_k"] for point in curve)
        raise EmbedkitError(
            f"'{index.meta['factory']}' met {budget.describe()} on the sample but not on all vectors (best recall@"
            f"{budget.k} {top:.4f}); raise --max-memory or lower the target",
            field="--max-memory",
        )
    if best["param"] is not None:
        value = max(best["value"], chosen["best"]["value"])
        index.set_search_params(**{"nprobe" if best["param"] == "nprobe" else "ef_search": value})
    return curve


def budget_table(record: dict[str, Any]) -> list[str]:
    """``meta["memory_budget"]`` as aligned text lines: each candidate's predicted and measured (projected to all
    vectors from its sample build) bytes, its fastest setting that met the target (else its best recall), the choice."""
    lines = [
        f"under {format_size(record['max_memory'])}, {record['target']} ({record['sample']['queries']}):",
        f"{'factory':<30} {'predicted':>11} {'measured':>11} {'recall@10':>9} {'QPS':>9}  met",
    ]
    for row in record["candidates"]:
        best = row.get("best") or max(row["curve"], key=lambda point: point["recall_at_k"], default=None)
        measured = format_size(row["projected_bytes"]) if "projected_bytes" in row else "not built"
        recall, qps = (f"{best['recall_at_k']:.4f}", f"{best['qps']:.0f}") if best else ("-", "-")
        mark = "  <- chosen" if row["factory"] == record["chosen"] else ""
        predicted, met = format_size(row["predicted_bytes"]), "yes" if row["met"] else "no"
        lines.append(f"{row['factory']:<30} {predicted:>11} {measured:>11} {recall:>9} {qps:>9}  {met}{mark}")
    lines.append(f"'{record['chosen']}' built on all vectors: {format_size(record['measured_bytes'])}")
    return lines
