"""Reproduction conditions as data: the YAML parsed and checked (errors name the file, line and field) without
importing torch, so ``embedkit reproduce --list`` and a bad table answer at once."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from embedkit.errors import EmbedkitError
from embedkit.search.retriever import Retriever, from_dict

DEFAULT_CONFIG = resources.files("embedkit.reproduce") / "conditions.yaml"
FIELDS = {
    "id": str,
    "description": str,
    "dataset": str,
    "split": str,
    "retriever": (str, dict),
    "model": dict,
    "sparse_model": dict,
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
    sparse_model: dict[str, Any] | None = None  # a hybrid's sparse part's model beside its dense one
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


def select(conditions: list[Condition], only: list[str] | None, path: str) -> list[Condition]:
    """The conditions named in ``only`` (all without it); an unknown id is refused."""
    if not only:
        return conditions
    unknown = sorted(set(only) - {c.id for c in conditions})
    if unknown:
        raise EmbedkitError(f"no condition with id {', '.join(unknown)}", path=path, field="id")
    return [c for c in conditions if c.id in only]
