"""The first-stage specs as typed values: ``Dense``, ``BM25``, ``Sparse`` (``splade``), ``LateInteraction``
(``colbert``), and ``Hybrid`` (any of them fused, by ``Fusion``). Their mapping form, shared by the CLI, the
reproduction YAML and reports, is ``embedkit.search.retriever``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from embedkit.errors import EmbedkitError
from embedkit.search.chunks import Aggregation
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
LATE_INDEXES = ("exact", "ivf", "plaid")
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
    model: str | None = None  # a hybrid part's own model (else the run's)
    type: ClassVar[str] = "dense"
    family: ClassVar[str | None] = "dense"

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
    family: ClassVar[str | None] = None  # no model: the texts

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
    model: str | None = None  # a hybrid part's own model (else the run's)
    type: ClassVar[str] = "splade"
    family: ClassVar[str | None] = "sparse"

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
    tokens: the reference), an ``ivf`` one (candidates from an IVF over token vectors: ``nprobe`` lists, the
    ``candidates`` nearest tokens of each query token; MaxSim over those documents) or a ``plaid`` one (tokens
    compressed to a centroid and 2 bits per dimension: ``nprobe`` centroids per query token, ``candidates`` documents
    scored by centroids, exact MaxSim over the decompressed best quarter)."""

    index: str = "exact"
    nprobe: int | None = None
    candidates: int | None = None
    model: str | None = None  # a hybrid part's own model (else the run's)
    type: ClassVar[str] = "colbert"
    family: ClassVar[str | None] = "multivector"

    @property
    def label(self) -> str:
        return f"colbert-{self.index}"

    def check(self) -> LateInteraction:
        _choose(self.index, LATE_INDEXES, "index")
        for name in ("nprobe", "candidates"):
            check_whole(getattr(self, name), name, minimum=1, maximum=MAX_SEARCH_PARAM)
        if self.index == "exact" and (self.nprobe, self.candidates) != (None, None):
            raise EmbedkitError("nprobe and candidates are the ivf and plaid indexes'; not the exact one's",
                                field="index")  # fmt: skip
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
    """Runs fused. ``parts`` is any list of first stages (``Dense``, ``BM25``, ``Sparse``, ``LateInteraction``,
    chunked or not), each model part searching its own ``model`` or else the run's. The three named slots are the
    older form, kept so the hybrids recorded with them keep their settings hash: a slot set to None is left out (by
    default dense and BM25); a sparse slot beside a dense one takes ``evaluate``'s ``sparse_model``."""

    dense: Dense | None = field(default_factory=Dense)
    bm25: BM25 | None = field(default_factory=BM25)
    fusion: Fusion = field(default_factory=Fusion)
    sparse: Sparse | None = None  # last: hybrids were built positionally as (dense, bm25, fusion) before it
    parts: tuple | None = None
    type: ClassVar[str] = "hybrid"
    family: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        if self.parts is None:
            return
        if (self.dense, self.bm25, self.sparse) not in ((Dense(), BM25(), None), (None, None, None)):
            raise EmbedkitError("give the parts as parts=[...] or as dense/bm25/sparse, not both", field="hybrid")
        object.__setattr__(self, "parts", tuple(self.parts))
        for name in ("dense", "bm25"):
            object.__setattr__(self, name, None)

    @property
    def components(self) -> dict[str, Any]:
        """The parts present, by run name, in the order fusion weights follow (a name repeated gets ``-2``, ...)."""
        if self.parts is None:
            named = {"dense": self.dense, "bm25": self.bm25, "splade": self.sparse}
            return {name: part for name, part in named.items() if part is not None}
        named: dict[str, Any] = {}
        for part in self.parts:
            name, number = part.type, 2
            while name in named:
                name, number = f"{part.type}-{number}", number + 1
            named[name] = part
        return named

    def check(self) -> Hybrid:
        parts = self.components
        if len(parts) < 2:
            raise EmbedkitError(f"a hybrid fuses two or more parts, not {len(parts)}", field="hybrid")
        for part in parts.values():
            if isinstance(part, Hybrid) or not hasattr(part, "check"):
                raise EmbedkitError("a hybrid's parts are first stages (dense, bm25, splade, colbert)", field="parts")
            part.check()
        self.fusion.check()
        weights = self.fusion.weights
        if weights is not None and len(weights) != len(parts):
            raise EmbedkitError(
                f"{len(weights)} weights for {len(parts)} parts ({', '.join(parts)})", field="fusion.weights"
            )
        return self


