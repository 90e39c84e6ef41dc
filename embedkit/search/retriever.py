"""A first-stage retriever as one typed value: ``Dense``, ``BM25``, ``Sparse`` (``splade``), ``LateInteraction``
(``colbert``) or ``Hybrid`` (any two or three of dense, BM25 and SPLADE, fused).

The CLI builds it from its flags, ``embedkit.evaluate`` takes it, the reproduction YAML writes it under
``retriever:`` with the same field names, and a report records it as ``to_dict`` gives it, so
``from_dict(report["retriever"])`` is the very spec that made the report.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any, Union

from embedkit.errors import EmbedkitError
from embedkit.search.specs import BM25, Dense, Fusion, Hybrid, LateInteraction, Sparse
from embedkit.settings_file import build

Retriever = Union[Dense, BM25, Sparse, LateInteraction, Hybrid]
KINDS: dict[str, type] = {"dense": Dense, "bm25": BM25, "splade": Sparse, "colbert": LateInteraction, "hybrid": Hybrid}


def to_dict(retriever: Retriever) -> dict[str, Any]:
    """``{"type": ..., field: value ...}``; a hybrid's parts are nested mappings of the same shape (without type), a
    part left out is None (but an absent sparse part is not written, so hybrids made before it existed keep their
    settings hash)."""
    if isinstance(retriever, Hybrid) and retriever.parts is not None:
        return {"type": "hybrid", "parts": [to_dict(part) for part in retriever.parts],
                "fusion": asdict(retriever.fusion)}  # fmt: skip
    values = _without_unset(asdict(retriever))
    if isinstance(retriever, Hybrid):
        del values["parts"]
        if retriever.sparse is None:
            del values["sparse"]
    return {"type": retriever.type, **values}


def _without_unset(values: dict[str, Any]) -> dict[str, Any]:
    """A dense spec (or part) without ``aggregation``/``sum_top`` when unset: records from before chunking keep
    their settings hash."""
    for key in ("aggregation", "sum_top", "model"):
        if key in values and values[key] is None:
            del values[key]
    for key, value in values.items():
        if isinstance(value, dict):
            values[key] = _without_unset(value)
    return values


def _part(cls: type, values: Any, name: str, path: Any) -> Any:
    if not isinstance(values, dict):
        raise EmbedkitError("expected a mapping", path=path, field=name)
    known = {f.name for f in fields(cls)}
    for key in values:
        if key not in known:
            raise EmbedkitError(
                f"unknown setting (known: {', '.join(sorted(known))})", path=path, field=f"{name}.{key}"
            )
    return build(cls, values, path)


def from_dict(values: Any, path: Any = None, name: str = "retriever") -> Retriever:
    """The spec a mapping spells (a report's ``retriever``, a YAML condition's); every key and type checked. A bare
    type name (``"bm25"``) is that retriever with its defaults."""
    if isinstance(values, str):
        values = {"type": values}
    kind = values.get("type") if isinstance(values, dict) else values
    if kind not in KINDS:
        raise EmbedkitError(f"type must be one of {', '.join(KINDS)}, not {kind!r}", path=path, field=f"{name}.type")
    values = {key: value for key, value in values.items() if key != "type"}
    if kind != "hybrid":
        return _part(KINDS[kind], values, name, path).check()
    if "parts" in values:
        return _parts_hybrid(values, path, name)
    parts = {"dense": Dense, "bm25": BM25, "sparse": Sparse, "fusion": Fusion}
    for key in values:
        if key not in parts:
            raise EmbedkitError(f"unknown part (known: {', '.join(parts)})", path=path, field=f"{name}.{key}")
    built = {  # a part not named takes Hybrid's default (dense and bm25 in, sparse out); null leaves it out
        key: None if values[key] is None else _part(cls, values[key], f"{name}.{key}", path)
        for key, cls in parts.items()
        if key in values
    }
    if built.get("fusion", Fusion()) is None:
        raise EmbedkitError("expected a mapping", path=path, field=f"{name}.fusion")
    return Hybrid(**built).check()


def _parts_hybrid(values: dict[str, Any], path: Any, name: str) -> Hybrid:
    unknown = set(values) - {"parts", "fusion"}
    if unknown:
        raise EmbedkitError("unknown setting beside parts (known: fusion)", path=path, field=f"{name}.{min(unknown)}")
    if not isinstance(values["parts"], list):
        raise EmbedkitError("expected a list of first stages", path=path, field=f"{name}.parts")
    parts = []
    for i, part in enumerate(values["parts"]):
        if not isinstance(part, (dict, str)) or (part if isinstance(part, str) else part.get("type")) == "hybrid":
            raise EmbedkitError("expected a first stage (dense, bm25, splade, colbert)", path=path,
                                field=f"{name}.parts[{i}]")  # fmt: skip
        parts.append(from_dict(part, path, f"{name}.parts[{i}]"))
    fusion = _part(Fusion, values.get("fusion") or {}, f"{name}.fusion", path)
    return Hybrid(fusion=fusion, parts=parts).check()


def retriever_of(value: Retriever | str | dict) -> Retriever:
    """A spec from a spec, a type name or a mapping."""
    if isinstance(value, (Dense, BM25, Sparse, LateInteraction, Hybrid)):
        return value.check()
    return from_dict(value)


def components(retriever: Retriever) -> dict[str, Any]:
    """A spec's first stages by run name: a hybrid's parts, or the spec itself under its type."""
    return retriever.components if retriever.type == "hybrid" else {retriever.type: retriever}


def _first(retriever: Retriever, kind: str) -> Any:
    return next((part for part in components(retriever).values() if part.type == kind), None)


def dense_part(retriever: Retriever) -> Dense | None:
    return _first(retriever, "dense")


def bm25_part(retriever: Retriever) -> BM25 | None:
    return _first(retriever, "bm25")


def sparse_part(retriever: Retriever) -> Sparse | None:
    return _first(retriever, "splade")


def late_part(retriever: Retriever) -> LateInteraction | None:
    return _first(retriever, "colbert")
