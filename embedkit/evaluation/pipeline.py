"""``evaluate``: retrieve (dense, BM25 or both fused), score, report; every score-changing setting recorded."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from embedkit.data.beir import BeirDataset, load_dataset
from embedkit.data.resolve import cache_home
from embedkit.encode.shards import encode_to_folder
from embedkit.errors import EmbedkitError
from embedkit.evaluation.metrics import compute_metrics, recall_curve
from embedkit.index.faiss_index import Index
from embedkit.models.embedding_model import EmbeddingModel
from embedkit.models.loading import load_model
from embedkit.protocols import Run
from embedkit.report.environment import library_versions
from embedkit.report.writer import write_report
from embedkit.search.bm25 import DEFAULT_B, DEFAULT_K1, bm25_searcher, drop_identical
from embedkit.search.dense import dense_search
from embedkit.search.fusion import fuse
from embedkit.storage import sha256_json

RETRIEVERS = ("dense", "bm25", "hybrid")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")


def report_folder_name(dataset: str, model: str, split: str, factory: str) -> str:
    """``<dataset>__<model>__<factory>__<split>``, e.g. ``scifact__all-MiniLM-L6-v2__Flat__test``."""
    return "__".join(_slug(part) for part in (dataset, Path(model).name or model, factory, split))


class Stopwatch:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str):
        start = time.perf_counter()
        yield
        self.seconds[stage] = round(time.perf_counter() - start, 3)


def evaluate(
    model: EmbeddingModel | str | None = None,
    dataset: BeirDataset | str | Path = "scifact",
    split: str = "test",
    factory: str = "Flat",
    k: int = 1000,
    *,
    output: str | Path | None = None,
    metric: str = "ip",
    ignore_identical_ids: bool = False,
    nprobe: int | None = None,
    ef_search: int | None = None,
    data_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
    retriever: str = "dense",
    bm25_backend: str = "bm25s",
    k1: float = DEFAULT_K1,
    b: float = DEFAULT_B,
    fusion: str = "rrf",
    fusion_weights: Sequence[float] | None = None,
    fusion_depth: int = 1000,
    rrf_k: int = 60,
    harness: str = "embedkit",
    mteb_task: str | None = None,
) -> dict[str, Any]:
    """Evaluate a retriever on a BEIR dataset; returns the report (and writes it under ``output`` if given).

    ``retriever`` is ``dense`` (the model over a FAISS index), ``bm25`` (``bm25_backend`` ``bm25s`` or
    ``pyserini``) or ``hybrid`` (both, fused by ``fusion``: ``rrf`` or ``interpolation`` with ``fusion_weights``
    for [dense, bm25]). Corpus embeddings and Lucene indexes are cached in ``cache_dir`` (default
    ``~/.cache/embedkit/embeddings``), keyed by the settings and the corpus content. ``harness="mteb"`` also
    runs ``mteb.evaluate`` on the same model, corpus embeddings and index type, and records MTEB's scores (its
    result JSON goes to ``mteb/`` in the report folder).
    """
    if retriever not in RETRIEVERS:
        raise EmbedkitError(f"unknown retriever '{retriever}' (choose from {', '.join(RETRIEVERS)})", field="retriever")
    if harness not in ("embedkit", "mteb"):
        raise EmbedkitError(f"unknown harness '{harness}' (choose from embedkit, mteb)", field="harness")
    if harness == "mteb" and retriever != "dense":
        raise EmbedkitError(f"the mteb harness runs dense retrieval, not '{retriever}'", field="harness")
    timer = Stopwatch()
    with timer("load_data"):
        data = dataset if isinstance(dataset, BeirDataset) else load_dataset(dataset, data_dir=data_dir)
        qrels = data.qrels(split)
        queries = data.split_queries(split)
        described = data.describe()
    cache_root = Path(cache_dir) if cache_dir else cache_home() / "embeddings"
    runs: dict[str, Run] = {}
    settings: dict[str, dict[str, Any]] = {}
    report: dict[str, Any] = {"model": None}
    if retriever in ("dense", "hybrid"):
        with timer("load_model"):
            model = model if isinstance(model, EmbeddingModel) else load_model(model)
        runs["dense"], settings["dense"], embeddings = _dense_run(
            model,
            data,
            described["corpus_sha256"],
            queries,
            cache_root,
            timer,
            factory,
            metric,
            k,
            ignore_identical_ids,
            nprobe,
            ef_search,
        )
        report.update(
            model=model.settings,
            embeddings_cache={"path": str(embeddings.path), "encoded_shards": embeddings.encoded_shards},
            device=model.device,
        )
    if retriever in ("bm25", "hybrid"):
        lucene_dir = cache_root / f"{_slug(data.name)}-lucene-{described['corpus_sha256'][:16]}"
        with timer("build_bm25"):
            lexical = bm25_searcher(data, bm25_backend, k1=k1, b=b, index_dir=lucene_dir)
        with timer("search_bm25"):
            run = lexical.search(queries, k + 1 if ignore_identical_ids else k)
            runs["bm25"] = drop_identical(run, k) if ignore_identical_ids else run
        settings["bm25"] = {"type": "bm25", **lexical.settings, "k": k, "ignore_identical_ids": ignore_identical_ids}
    if retriever == "hybrid":
        weights = list(fusion_weights) if fusion_weights is not None else None
        with timer("fuse"):
            run = fuse([runs["dense"], runs["bm25"]], fusion, weights=weights, depth=fusion_depth, k=k, rrf_k=rrf_k)
        fusion_settings: dict[str, Any] = {"method": fusion, "depth": fusion_depth, "runs": ["dense", "bm25"]}
        fusion_settings.update({"rrf_k": rrf_k} if fusion == "rrf" else {"weights": weights or [0.5, 0.5]})
        described_retriever = {"type": "hybrid", "k": k, "fusion": fusion_settings, **settings}
    else:
        run, described_retriever = runs[retriever], settings[retriever]
    with timer("metrics"):
        metrics, per_query = compute_metrics(qrels, run)
        report["recall_curve"] = recall_curve(qrels, run)
        if retriever == "hybrid":
            report["component_metrics"] = {name: compute_metrics(qrels, part)[0] for name, part in runs.items()}
            report["component_recall_curves"] = {name: recall_curve(qrels, part) for name, part in runs.items()}
    report = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "dataset": {**described, "split": split, "queries": len(queries)},
        **report,
        "retriever": described_retriever,
        "metrics": metrics,
        "queries_evaluated": len(per_query),
        "queries_without_results": sorted(set(qrels) - set(per_query)),
        "timings_s": timer.seconds,
        "library_versions": library_versions(),
    }
    folder = None
    if output is not None:
        model_part, retriever_part = _name_parts(report)
        folder = Path(output) / report_folder_name(data.name, model_part, split, retriever_part)
    if harness == "mteb":
        from embedkit.integrations.mteb import evaluate_mteb

        with timer("mteb"):
            report["mteb"] = evaluate_mteb(
                model,
                data,
                split,
                factory=factory,
                corpus_cache=embeddings,
                output=None if folder is None else folder / "mteb",
                task_name=mteb_task,
            )
    if folder is not None:
        report["folder"] = str(write_report(folder, report, run, per_query))
    return report


def _dense_run(
    model: EmbeddingModel,
    data: BeirDataset,
    corpus_sha256: str,
    queries: dict[str, str],
    cache_root: Path,
    timer: Stopwatch,
    factory: str,
    metric: str,
    k: int,
    ignore_identical_ids: bool,
    nprobe: int | None,
    ef_search: int | None,
) -> tuple[Run, dict[str, Any], Any]:
    """Encode the corpus (or reuse its cached embeddings), index it, search it: the run, its settings, the cache."""
    key = sha256_json([model.settings, corpus_sha256])[:16]
    with timer("encode_corpus"):
        embeddings = encode_to_folder(model, data.corpus, cache_root / f"{_slug(data.name)}-{key}")
    with timer("build_index"):
        index = Index.build(
            embeddings.embeddings(),
            embeddings.ids(),
            factory=factory,
            metric=metric,
            model_settings=model.settings,
            nprobe=nprobe,
            ef_search=ef_search,
        )
    with timer("search"):
        run = dense_search(model, index, queries, k=k, ignore_identical_ids=ignore_identical_ids)
    settings = {
        "type": "dense",
        "factory": factory,
        "metric": metric,
        "search_params": index.search_params,
        "k": k,
        "ignore_identical_ids": ignore_identical_ids,
    }
    return run, settings, embeddings


def _name_parts(report: dict[str, Any]) -> tuple[str, str]:
    """(model, retriever) parts of the report folder name; a dense run keeps its historic ``model__factory``."""
    retriever = report["retriever"]
    if retriever["type"] == "dense":
        return report["model"]["model"], retriever["factory"]
    if retriever["type"] == "bm25":
        return "bm25", retriever["backend"]
    fusion = retriever["fusion"]["method"]
    return report["model"]["model"], f"{retriever['dense']['factory']}+bm25-{retriever['bm25']['backend']}-{fusion}"
