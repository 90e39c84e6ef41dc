"""A first-stage retriever as one typed value: ``Dense``, ``BM25``, ``Sparse`` (``splade``), ``LateInteraction``
(``colbert``) or ``Hybrid`` (any two or three of dense, BM25 and SPLADE, fused).

The CLI builds it from its flags, ``embedkit.evaluate`` takes it, the reproduction YAML writes it under
``retriever:`` with the same field names, and a report records it as ``to_dict`` gives it, so
``from_dict(report["retriever"])`` is the very spec that made the report.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Union

from embedkit.errors import EmbedkitError
from embedkit.search.chunks import Aggregation
from embedkit.settings_file import build
from embedkit.validation import check_number, check_whole

FUSIONS = ("rrf", "interpolation")
# Upper bounds where a larger value could only exhaust memory or lose precision, far above any useful setting:
# FAISS sizes a search's heaps by ef_search; BM25's k1 saturates long before; 1/(rrf_k + rank) stops telling ranks
# apart.
MAX_SEARCH_PARAM = 1 << 24
MAX_BM25_K1 = 1000.0
MAX_RRF_K = 1_000_000
MAX_FUSION_WEIGHT = 1e6
BM25_BACKENDS = ("bm25s", "pyserini")
SPARSE_INDEXES = ("exact", "impact", "seismic")
LATE_INDEXES = ("exact", "ivf")
MAX_QUANTIZATION = 1e6  # Lucene stores an impact as a 32-bit integer: weights above ~2000 times this overflow


def _choose(value: str, choices: tuple[str, ...], name: str) -> None:
    if value not in choices:
        raise EmbedkitError(f"unknown value '{value}' (choose from {', '.join(choices)})", field=name)


@dataclass(frozen=True)
class Dense:
    """The model's vectors in a FAISS index (any factory string) searched with ``metric``; ``aggregation`` (and
    ``sum_top``) turn a chunked model's chunk scores into document scores (``embedkit.search.chunks``)."""

    factory: str = "Flat"
    metric: str = "ip"
    nprobe: int | None = None
    ef_search: int | None = None
    aggregation: str | None = None
    sum_top: int | None = None
    type: ClassVar[str] = "dense"

    @property
    def aggregation_setting(self) -> Aggregation | None:
        if self.aggregation is None and self.sum_top is None:
            return None
        return Aggregation(self.aggregation or "maxp", self.sum_top)

    @property
    def label(self) -> str:  # its part of a report folder's name
        return self.factory

    def check(self) -> Dense:
        from embedkit.index import check_factory

        _choose(self.metric, ("ip", "l2"), "metric")
        check_factory(self.factory, metric=self.metric)  # the string alone: one line before any encoding
        for name in ("nprobe", "ef_search"):
            check_whole(getattr(self, name), name, minimum=1, maximum=MAX_SEARCH_PARAM)
        if self.aggregation_setting is not None:
            self.aggregation_setting.check()
        return self


@dataclass(frozen=True)
class BM25:
    """BM25 with ``bm25s`` (pure Python) or pyserini's Lucene; pyserini's BEIR settings by default."""

    backend: str = "bm25s"
    k1: float = 0.9
    b: float = 0.4
    type: ClassVar[str] = "bm25"

    @property
    def label(self) -> str:
        return f"bm25-{self.backend}"

    def check(self) -> BM25:
        _choose(self.backend, BM25_BACKENDS, "backend")
        check_number(self.k1, "k1", minimum=0, maximum=MAX_BM25_K1)  # NaN refused by name, not passed as "not < 0"
        check_number(self.b, "b", minimum=0, maximum=1)
        return self


@dataclass(frozen=True)
class Sparse:
    """A learned sparse model's vectors (SPLADE, CSR) in an ``exact`` index (sparse products, the reference), a
    Lucene ``impact`` index (pyserini's layout; weights quantised ``round(w · quantization)``) or a ``seismic`` one
    (approximate: ``query_cut`` query terms, ``heap_factor`` of the blocks' bound)."""

    index: str = "exact"
    quantization: float = 100.0
    query_cut: int | None = None
    heap_factor: float | None = None
    type: ClassVar[str] = "splade"

    @property
    def label(self) -> str:
        return f"splade-{self.index}"

    def check(self) -> Sparse:
        _choose(self.index, SPARSE_INDEXES, "index")
        check_number(self.quantization, "quantization", minimum=1, maximum=MAX_QUANTIZATION)
        check_whole(self.query_cut, "query_cut", minimum=1, maximum=MAX_SEARCH_PARAM)
        check_number(self.heap_factor, "heap_factor", minimum=0, maximum=1)
        if self.index != "seismic" and (self.query_cut, self.heap_factor) != (None, None):
            raise EmbedkitError(
                f"query_cut and heap_factor are Seismic's; not for the {self.index} index", field="index"
            )
        return self


@dataclass(frozen=True)
class LateInteraction:
    """A multi-vector model's token vectors (ColBERT), scored by MaxSim over an ``exact`` index (every document's
    tokens: the reference) or an ``ivf`` one (candidates from an IVF over token vectors: ``nprobe`` lists, the
    ``candidates`` nearest tokens of each query token; MaxSim over those documents)."""

    index: str = "exact"
    nprobe: int | None = None
    candidates: int | None = None
    type: ClassVar[str] = "colbert"

    @property
    def label(self) -> str:
        return f"colbert-{self.index}"

    def check(self) -> LateInteraction:
        _choose(self.index, LATE_INDEXES, "index")
        for name in ("nprobe", "candidates"):
            check_whole(getattr(self, name), name, minimum=1, maximum=MAX_SEARCH_PARAM)
        if self.index == "exact" and (self.nprobe, self.candidates) != (None, None):
            raise EmbedkitError("nprobe and candidates are the ivf index's; not for the exact one", field="index")
        return self


@dataclass(frozen=True)
class Fusion:
    """Reciprocal-rank fusion, or interpolation of min-max normalised scores (``weights``: one per part of the
    hybrid, in the order dense, bm25, splade)."""

    method: str = "rrf"
    weights: list[float] | None = None
    depth: int = 1000
    rrf_k: int = 60

    def check(self) -> Fusion:
        _choose(self.method, FUSIONS, "method")
        if self.method == "rrf" and self.weights is not None:
            raise EmbedkitError("reciprocal-rank fusion takes no weights", field="weights")
        if self.weights is not None:
            for i, weight in enumerate(self.weights):
                check_number(weight, f"weights[{i}]", minimum=0, maximum=MAX_FUSION_WEIGHT)
            if sum(self.weights) == 0:
                raise EmbedkitError(f"give weights >= 0, not all 0: {self.weights}", field="weights")
        check_whole(self.depth, "depth", minimum=1)
        check_whole(self.rrf_k, "rrf_k", minimum=0, maximum=MAX_RRF_K)
        return self


@dataclass(frozen=True)
class Hybrid:
    """Two or three runs fused: a part set to None is left out (by default dense and BM25). A dense part is the run's
    model; a sparse part beside it has its own model (``evaluate``'s ``sparse_model``)."""

    dense: Dense | None = field(default_factory=Dense)
    bm25: BM25 | None = field(default_factory=BM25)
    fusion: Fusion = field(default_factory=Fusion)
    sparse: Sparse | None = None  # last: hybrids were built positionally as (dense, bm25, fusion) before it
    type: ClassVar[str] = "hybrid"

    @property
    def parts(self) -> dict[str, Dense | BM25 | Sparse]:
        """The parts present, by run name, in the order fusion weights follow."""
        named = {"dense": self.dense, "bm25": self.bm25, "splade": self.sparse}
        return {name: part for name, part in named.items() if part is not None}

    def check(self) -> Hybrid:
        parts = self.parts
        if len(parts) < 2:
            raise EmbedkitError(f"a hybrid fuses two or three parts, not {len(parts)}", field="hybrid")
        for part in parts.values():
            part.check()
        self.fusion.check()
        weights = self.fusion.weights
        if weights is not None and len(weights) != len(parts):
            raise EmbedkitError(
                f"{len(weights)} weights for {len(parts)} parts ({', '.join(parts)})", field="fusion.weights"
            )
        return self


Retriever = Union[Dense, BM25, Sparse, LateInteraction, Hybrid]
KINDS: dict[str, type] = {"dense": Dense, "bm25": BM25, "splade": Sparse, "colbert": LateInteraction, "hybrid": Hybrid}


def to_dict(retriever: Retriever) -> dict[str, Any]:
    """``{"type": ..., field: value ...}``; a hybrid's parts are nested mappings of the same shape (without type), a
    part left out is None (but an absent sparse part is not written, so hybrids made before it existed keep their
    settings hash)."""
    values = _without_unset(asdict(retriever))
    if isinstance(retriever, Hybrid) and retriever.sparse is None:
        del values["sparse"]
    return {"type": retriever.type, **values}


def _without_unset(values: dict[str, Any]) -> dict[str, Any]:
    """A dense spec (or part) without ``aggregation``/``sum_top`` when unset: records from before chunking keep
    their settings hash."""
    for key in ("aggregation", "sum_top"):
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


def retriever_of(value: Retriever | str | dict) -> Retriever:
    """A spec from a spec, a type name or a mapping."""
    if isinstance(value, (Dense, BM25, Sparse, LateInteraction, Hybrid)):
        return value.check()
    return from_dict(value)


def dense_part(retriever: Retriever) -> Dense | None:
    return retriever if isinstance(retriever, Dense) else retriever.dense if isinstance(retriever, Hybrid) else None


def bm25_part(retriever: Retriever) -> BM25 | None:
    return retriever if isinstance(retriever, BM25) else retriever.bm25 if isinstance(retriever, Hybrid) else None


def sparse_part(retriever: Retriever) -> Sparse | None:
    return retriever if isinstance(retriever, Sparse) else retriever.sparse if isinstance(retriever, Hybrid) else None


def late_part(retriever: Retriever) -> LateInteraction | None:
    return retriever if isinstance(retriever, LateInteraction) else None
