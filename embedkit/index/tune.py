"""Tune an approximate index: sweep IVF ``nprobe`` or HNSW ``efSearch``, measure recall@k against exact search and
queries per second, and keep the fastest setting that reaches the target recall.

The default queries are a seeded sample of the corpus vectors themselves (no model needed); real queries, encoded
with the model that made the embeddings, give a curve closer to what users will see.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from embedkit.data.beir import load_dataset
from embedkit.errors import EmbedkitError
from embedkit.index.faiss_helpers import check_model_settings
from embedkit.index.faiss_index import Index
from embedkit.index.rescore import exact_search
from embedkit.index.search_params import current_search_param, unwrap
from embedkit.index.vectors import Vectors
from embedkit.models.loading import load_model_from_settings

EF_SEARCH_VALUES = (16, 32, 64, 128, 256, 512, 1024)
# Search rows (queries x k) to a ranking quality, higher is better: nDCG@10 on qrels, given by a caller that has them.
Quality = Callable[[np.ndarray], float]


@dataclass(frozen=True)
class Target:
    """What a search setting must reach: recall@k >= ``recall`` against exact search or, with ``quality``, at most
    ``max_drop`` below the quality of the exact top-k (e.g. nDCG@10 on a dataset's qrels)."""

    recall: float = 0.95
    quality: Quality | None = None
    max_drop: float = 0.0
    quality_name: str = "ndcg_at_10"

    def describe(self, k: int) -> str:
        return f"{self.quality_name} drop <= {self.max_drop}" if self.quality else f"recall@{k} >= {self.recall}"

    def met(self, point: dict[str, Any], reference: float | None) -> bool:
        if self.quality is None or reference is None:
            return point["recall_at_k"] >= self.recall
        return point[self.quality_name] >= reference - self.max_drop - 1e-12


def _powers_of_two(limit: int) -> list[int]:
    values = [1]
    while values[-1] * 2 < limit:
        values.append(values[-1] * 2)
    return sorted({*values, limit})


def sweep_values(index: Index, k: int = 10) -> tuple[str, list[int]]:
    """The parameter that trades speed for recall on ``index`` and the values worth sweeping.

    IVF: ``nprobe`` in powers of two up to ``nlist``; HNSW: ``efSearch`` 16..1024 (values under ``k`` act as ``k``).
    """
    if index.binary:
        inner = faiss.downcast_IndexBinary(index.faiss_index)
        ivf = inner if isinstance(inner, faiss.IndexBinaryIVF) else None
        hnsw = isinstance(inner, faiss.IndexBinaryHNSW)
    else:
        ivf = faiss.try_extract_index_ivf(index.faiss_index)
        inner = unwrap(index.faiss_index)
        if ivf is None and hasattr(inner, "nlist") and hasattr(inner, "nprobe"):  # a GPU IVF index
            ivf = inner
        hnsw = hasattr(inner, "hnsw")
    if ivf is not None:
        return "nprobe", _powers_of_two(int(ivf.nlist))
    if hnsw:
        return "efSearch", sorted({max(value, k) for value in EF_SEARCH_VALUES})
    raise EmbedkitError(
        f"index '{index.meta.get('factory')}' has nothing to tune (only IVF nprobe and HNSW efSearch are)",
        field="factory",
    )


def _restore(index: Index, keyword: str, value: int, params: dict[str, int]) -> None:
    index.set_search_params(**{keyword: value})
    index.search_params = dict(params)
    index.meta["search_params"] = dict(params)


@dataclass
class Tuning:
    """The measured curve and the chosen setting (the fastest with recall@k >= the target)."""

    param: str
    value: int
    recall_at_k: float
    qps: float
    k: int
    target_recall: float
    queries: dict[str, Any]
    curve: list[dict[str, Any]] = field(default_factory=list)

    def to_meta(self) -> dict[str, Any]:
        """The record kept in the index's meta.json (``tuning``)."""
        return {
            "param": self.param,
            "value": self.value,
            "recall_at_k": self.recall_at_k,
            "qps": self.qps,
            "k": self.k,
            "target_recall": self.target_recall,
            "queries": self.queries,
            "curve": self.curve,
        }

    def table(self) -> list[str]:
        """The curve as aligned text lines, the chosen row marked."""
        lines = [f"{self.param:>9}  {f'recall@{self.k}':>10}  {'QPS':>10}"]
        for point in self.curve:
            mark = "  <- chosen" if point["value"] == self.value else ""
            lines.append(f"{point['value']:>9}  {point['recall_at_k']:>10.4f}  {point['qps']:>10.0f}{mark}")
        return lines


def recall_at_k(truth: np.ndarray, found: np.ndarray) -> float:
    """Mean share of each query's exact top-k rows that ``found`` also returns."""
    shares = []
    for exact, approx in zip(truth, found):
        exact = exact[exact >= 0]
        if len(exact):
            shares.append(len(np.intersect1d(exact, approx[approx >= 0])) / len(exact))
    return float(np.mean(shares)) if shares else 1.0


def _timed(index: Index, queries: np.ndarray, k: int, repeats: int) -> tuple[np.ndarray, float]:
    """Rows of one batch search of all queries, and the best wall time of ``repeats`` runs."""
    best = np.inf
    rows = np.empty(0)
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        _, rows = index.search_rows(queries, k)
        best = min(best, time.perf_counter() - start)
    return rows, best


def measure_point(
    index: Index, queries: np.ndarray, truth: np.ndarray, k: int, target: Target, reference: float | None, repeats: int
) -> dict[str, Any]:
    """Recall@k (and the target's quality), queries/s and whether the target is met, at the index's settings now."""
    rows, seconds = _timed(index, queries, k, repeats)
    point: dict[str, Any] = {"recall_at_k": recall_at_k(truth, rows), "qps": len(queries) / seconds}
    if target.quality is not None:
        point[target.quality_name] = target.quality(rows)
    point["met"] = target.met(point, reference)
    return point


def measure_curve(
    index: Index,
    queries: np.ndarray,
    truth: np.ndarray,
    k: int = 10,
    target: Target | None = None,
    *,
    values: list[int] | None = None,
    repeats: int = 3,
    extra_points: int = 2,
) -> list[dict[str, Any]]:
    """The index's search parameter swept over ``values`` (default ``sweep_values``): one measured point each,
    stopping ``extra_points`` settings after the target is first met, or at recall 1. The index keeps the last
    setting; ``tune`` restores or applies one."""
    target = target or Target()
    param, default_values = sweep_values(index, k)
    keyword = "nprobe" if param == "nprobe" else "ef_search"
    reference = target.quality(truth) if target.quality is not None else None
    curve: list[dict[str, Any]] = []
    reached_at = None
    for value in sorted(set(values)) if values else default_values:
        index.set_search_params(**{keyword: value})
        point = {"param": param, "value": value, **measure_point(index, queries, truth, k, target, reference, repeats)}
        curve.append(point)
        if point["met"] and reached_at is None:
            reached_at = len(curve)
        if point["recall_at_k"] >= 1.0 or (reached_at is not None and len(curve) - reached_at >= extra_points):
            break
    return curve


def tune(
    index: Index,
    queries: np.ndarray | None = None,
    *,
    ground_truth: np.ndarray | None = None,
    vectors: Any = None,
    k: int = 10,
    target_recall: float = 0.95,
    values: list[int] | None = None,
    sample: int = 1000,
    seed: int = 0,
    repeats: int = 3,
    extra_points: int = 2,
    query_source: str | None = None,
    apply: bool = True,
) -> Tuning:
    """Sweep the index's search parameter and choose the fastest setting whose recall@k reaches ``target_recall``.

    ``queries`` default to a seeded ``sample`` of the float vectors; ``ground_truth`` (exact top-k rows per query)
    defaults to exact search over the float vectors (``vectors``, else the index's attached ones), streamed from
    disk. The sweep stops ``extra_points`` settings after the target is first reached, or at recall 1. With
    ``apply`` the choice is set on the index and recorded with the curve in ``index.meta["tuning"]``.
    """
    if not 0 < target_recall <= 1:
        raise EmbedkitError(f"the target recall must be in (0, 1], got {target_recall}", field="target_recall")
    if k < 1:
        raise EmbedkitError(f"k must be >= 1, got {k}", field="k")
    param, default_values = sweep_values(index, k)
    values = sorted(set(values)) if values else default_values
    float_vectors = None
    if queries is None or ground_truth is None:
        float_vectors = Vectors.open(vectors) if vectors is not None else index.vectors
    if queries is None:
        queries = float_vectors.sample(sample, seed)
        query_source = query_source or f"{len(queries)} corpus vectors sampled with seed {seed}"
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    if ground_truth is None:
        _, ground_truth = exact_search(queries, float_vectors, k, index.metric)
    keyword = "nprobe" if param == "nprobe" else "ef_search"
    before, params_before = current_search_param(index.faiss_index, param), dict(index.search_params)
    target = Target(recall=target_recall)
    curve = measure_curve(
        index, queries, ground_truth, k, target, values=values, repeats=repeats, extra_points=extra_points
    )
    passing = [point for point in curve if point["met"]]
    if not passing:
        _restore(index, keyword, before, params_before)
        best = max(curve, key=lambda point: point["recall_at_k"])
        raise EmbedkitError(
            f"no {param} reaches recall@{k} {target_recall}: the best is {best['recall_at_k']:.4f} at "
            f"{param}={best['value']}; lower the target recall, rescore, or choose a finer index",
            field="target_recall",
        )
    chosen = max(passing, key=lambda point: point["qps"])
    result = Tuning(
        param=param,
        value=chosen["value"],
        recall_at_k=chosen["recall_at_k"],
        qps=chosen["qps"],
        k=k,
        target_recall=target_recall,
        queries={"count": len(queries), "source": query_source or "given"},
        curve=curve,
    )
    if apply:
        index.set_search_params(**{keyword: result.value})
        index.meta["tuning"] = result.to_meta()
    else:
        _restore(index, keyword, before, params_before)
    return result


def dataset_query_vectors(
    model_settings: dict[str, Any], dataset: str, split: str | None = None, data_dir: str | Path | None = None
) -> tuple[np.ndarray, str]:
    """A dataset's queries encoded with the model recorded in the embeddings (its prompts and length limits)."""
    data = load_dataset(dataset, data_dir=data_dir)
    texts = data.split_queries(split) if split else data.queries
    if not texts:
        raise EmbedkitError(f"the dataset has no queries{f' in split {split!r}' if split else ''}", path=dataset)
    model = load_model_from_settings(model_settings)
    check_model_settings(model_settings, model.settings)  # the queries must be encoded as the documents were
    vectors = model.encode_queries(list(texts.values()))
    return vectors, f"{len(texts)} queries of {data.name}{f' ({split})' if split else ''}"


def tune_index(
    index: Index,
    *,
    target_recall: float = 0.95,
    k: int = 10,
    dataset: str | None = None,
    split: str | None = None,
    data_dir: str | Path | None = None,
    **options: Any,
) -> Tuning:
    """``tune`` with a dataset's real queries when one is named (encoded with the index's model), else a sample of
    the corpus vectors; what ``embedkit index --tune`` runs."""
    queries, source = None, None
    if dataset is not None:
        if not index.meta.get("model"):
            raise EmbedkitError("tuning on a dataset's queries needs the model recorded in the index's meta.json")
        queries, source = dataset_query_vectors(index.meta["model"], dataset, split, data_dir)
    elif split is not None:
        raise EmbedkitError("--tune-split needs --tune-dataset")
    return tune(index, queries, k=k, target_recall=target_recall, query_source=source, **options)
