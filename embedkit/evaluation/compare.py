"""Comparing report folders: per-metric means, paired significance against the first run, per-query gains/losses."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.errors import EmbedkitError
from embedkit.evaluation.significance import paired_test
from embedkit.storage import read_json
from embedkit.validation import check_whole

DEFAULT_METRICS = ("ndcg_at_10", "recall_at_100", "mrr_at_10")
# Above this the tests take minutes per metric and tell nothing more (the p-value's resolution is 1/resamples).
MAX_RESAMPLES = 1_000_000
MAX_SEED = 2**63 - 1


@dataclass
class RunFolder:
    """A report folder written by ``embedkit evaluate``: its report and per-query scores."""

    path: Path
    report: dict[str, Any]
    per_query: dict[str, dict[str, float]]

    @property
    def label(self) -> str:
        return self.path.name

    def scores(self, metric: str, query_ids: list[str]) -> np.ndarray:
        try:
            return np.array([self.per_query[q][metric] for q in query_ids], dtype=np.float64)
        except KeyError:
            raise EmbedkitError(f"no per-query '{metric}'", path=self.path / "per_query.json", field=metric) from None


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise EmbedkitError("not found; is this a report folder written by 'embedkit evaluate'?", path=path)
    found = read_json(path)
    if not isinstance(found, dict):
        raise EmbedkitError("expected a JSON object", path=path)
    return found


def load_run_folder(path: str | Path) -> RunFolder:
    path = Path(path)
    return RunFolder(path, _read_json(path / "report.json"), _read_json(path / "per_query.json"))


def _same_dataset(runs: list[RunFolder]) -> list[str]:
    """Paired tests only mean something on the same corpus and split: refuse otherwise. Judgements that differ (or
    cannot be checked) are allowed but said, since each run's per-query scores come from its own qrels."""
    first = runs[0].report["dataset"]
    warnings = []
    for run in runs[1:]:
        dataset = run.report["dataset"]
        for key in ("corpus_sha256", "split"):
            if dataset.get(key) != first.get(key):
                raise EmbedkitError(
                    f"dataset {key} {dataset.get(key)!r} differs from {first.get(key)!r} in {runs[0].path}",
                    path=run.path / "report.json",
                    field=f"dataset.{key}",
                )
        ours, theirs = first.get("qrels_sha256"), dataset.get("qrels_sha256")
        if ours is None or theirs is None:
            warnings.append(f"{run.label} or {runs[0].label} does not record its qrels hash: judgements not checked")
        elif ours != theirs:
            warnings.append(
                f"{run.label} was scored on other judgements than {runs[0].label} (qrels sha256 {theirs[:12]} vs "
                f"{ours[:12]}); each run's per-query scores come from its own qrels"
            )
    return warnings


def _extremes(query_ids: list[str], a: np.ndarray, b: np.ndarray, top: int) -> tuple[list[dict], list[dict]]:
    delta = b - a
    order = np.argsort(-delta, kind="stable")
    rows = [{"query_id": query_ids[i], "a": float(a[i]), "b": float(b[i]), "delta": float(delta[i])} for i in order]
    gains = [row for row in rows[:top] if row["delta"] > 0]
    losses = [row for row in reversed(rows[-top:]) if row["delta"] < 0]
    return gains, losses


def _describe(run: RunFolder, metrics: Sequence[str], query_ids: list[str]) -> dict[str, Any]:
    retriever = run.report.get("retriever", {})
    model = run.report.get("model") or {}
    return {
        "label": run.label,
        "folder": str(run.path),
        "retriever": retriever.get("type"),
        "model": model.get("model"),
        "means": {metric: float(run.scores(metric, query_ids).mean()) for metric in metrics},
    }


def compare_runs(
    folders: Sequence[str | Path],
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    resamples: int = 10_000,
    seed: int = 0,
    top: int = 5,
) -> dict[str, Any]:
    """Compare every run with the first (the baseline) on the queries all runs scored."""
    for name, value, low, high in (("resamples", resamples, 1, MAX_RESAMPLES), ("seed", seed, 0, MAX_SEED)):
        check_whole(value, name, minimum=low, maximum=high)
    check_whole(top, "top", minimum=0)
    if len(folders) < 2:
        raise EmbedkitError(f"compare needs at least two report folders, got {len(folders)}")
    runs = [load_run_folder(folder) for folder in folders]
    warnings = _same_dataset(runs)
    shared = set(runs[0].per_query).intersection(*(run.per_query for run in runs[1:]))
    query_ids = sorted(shared)
    if len(query_ids) < 2:
        raise EmbedkitError(f"the runs share {len(query_ids)} scored queries; paired tests need at least 2")
    baseline, primary = runs[0], metrics[0]
    comparisons = []
    for run in runs[1:]:
        tests = {
            metric: paired_test(
                baseline.scores(metric, query_ids), run.scores(metric, query_ids), resamples=resamples, seed=seed
            ).as_dict()
            for metric in metrics
        }
        a, b = baseline.scores(primary, query_ids), run.scores(primary, query_ids)
        gains, losses = _extremes(query_ids, a, b, top)
        comparisons.append(
            {
                "a": baseline.label,
                "b": run.label,
                "tests": tests,
                "per_query_delta": dict(zip(query_ids, (b - a).tolist())),
                "biggest_gains": gains,
                "biggest_losses": losses,
            }
        )
    dataset = baseline.report["dataset"]
    return {
        "dataset": {"name": dataset.get("name"), "split": dataset.get("split")},
        "baseline": baseline.label,
        "metrics": list(metrics),
        "primary_metric": primary,
        "queries_compared": len(query_ids),
        "queries_not_shared": sum(len(set(run.per_query) - shared) for run in runs),
        "warnings": warnings,
        "runs": [_describe(run, metrics, query_ids) for run in runs],
        "comparisons": comparisons,
        "settings": {
            "t_test": "scipy.stats.ttest_rel (two-sided)",
            "randomization_test": "scipy.stats.permutation_test, paired sign flips of the mean difference",
            "bootstrap": "scipy.stats.bootstrap, percentile interval of the mean difference",
            "resamples": resamples,
            "seed": seed,
            "confidence": 0.95,
            "scipy": metadata.version("scipy"),
        },
    }
