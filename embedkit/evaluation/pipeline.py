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
from embedkit.encode.cache import cached_corpus_embeddings, default_cache_root
from embedkit.environment import library_versions
from embedkit.errors import EmbedkitError
from embedkit.evaluation.metrics import compute_metrics, recall_curve
from embedkit.index.faiss_index import Index
from embedkit.models.embedding_model import EmbeddingModel
from embedkit.models.loading import load_model
from embedkit.protocols import Run
from embedkit.report.writer import REPORT_FORMAT, write_report
from embedkit.search.bm25 import DEFAULT_B, DEFAULT_K1, bm25_searcher, drop_identical
from embedkit.search.dense import dense_search
from embedkit.search.fusion import fuse
from embedkit.storage import sha256_json

RETRIEVERS = ("dense", "bm25", "hybrid")


def _slug(text: str) -> str:
    """A readable file-name part: letters and digits of any script kept, anything else one dash."""
    return re.sub(r"[^\w.-]+", "-", text).strip("-.") or "x"


def report_folder_name(dataset: str, model: str, retriever: str, split: str, settings_sha256: str) -> str:
    """``<dataset>__<model>__<retriever>__<split>__<hash>``: a readable part, then 8 hex digits of the hash of every
    setting that changes a score, so runs that differ in any of them never share a folder."""
    readable = "__".join(_slug(part) for part in (dataset, Path(model).name or model, retriever, split))
    return f"{readable}__{settings_sha256[:8]}"


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
    overwrite: bool = False,
) -> dict[str, Any]:
    """Evaluate a retriever on a BEIR dataset; returns the report (and writes it under ``output`` if given).

    ``retriever`` is ``dense`` (the model over a FAISS index), ``bm25`` (``bm25_backend`` ``bm25s`` or
    ``pyserini``) or ``hybrid`` (both, fused by ``fusion``: ``rrf`` or ``interpolation`` with ``fusion_weights``
    for [dense, bm25]). Corpus embeddings and Lucene indexes are cached in ``cache_dir`` (default
    ``~/.cache/embedkit/embeddings``), keyed by the settings and the corpus content. ``harness="mteb"`` also
    runs ``mteb.evaluate`` on the same model, corpus embeddings and index type, and records MTEB's scores (its
    result JSON goes to ``mteb/`` in the report folder).

    The report folder is written as one unit and swapped in whole. Its name ends in a hash of every setting that
    changes a score, so a rerun with the same settings replaces its own earlier report; any other existing folder is
    kept unless ``overwrite``.
    """
    if int(k) != k or k < 1:
        raise EmbedkitError(f"must be a whole number >= 1, not {k}", field="k")
    if retriever not in RETRIEVERS:
        raise EmbedkitError(f"unknown retriever '{retriever}' (choose from {', '.join(RETRIEVERS)})", field="retriever")
    if harness not in ("embedkit", "mteb"):
        raise EmbedkitError(f"unknown harness '{harness}' (choose from embedkit, mteb)", field="harness")
    if harness == "mteb" and retriever != "dense":
        raise EmbedkitError(f"the mteb harness runs dense retrieval, not '{retriever}'", field="harness")
    if retriever != "hybrid" and fusion_weights is not None:
        raise EmbedkitError(f"fusion weights do nothing with retriever '{retriever}'", field="fusion_weights")
    timer = Stopwatch()
    with timer("load_data"):
        data = dataset if isinstance(dataset, BeirDataset) else load_dataset(dataset, data_dir=data_dir)
        qrels = data.qrels(split)
        queries = data.split_queries(split)
        described = {**data.describe(), "split": split, "qrels_sha256": data.qrels_sha256(split)}
    if not queries:
        raise EmbedkitError(f"split '{split}' judges no queries: nothing to evaluate", path=data.path, field="split")
    cache_root = Path(cache_dir) if cache_dir else default_cache_root()
    runs: dict[str, Run] = {}
    settings: dict[str, dict[str, Any]] = {}
    report: dict[str, Any] = {"model": None}
    if retriever in ("dense", "hybrid"):
        with timer("load_model"):
            model = model if isinstance(model, EmbeddingModel) else load_model(model)
        runs["dense"], settings["dense"], embeddings = _dense_run(
            model,
            data,
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
        lucene_dir = cache_root / f"lucene-{described['corpus_sha256'][:16]}"
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
    if not per_query:
        raise EmbedkitError(f"the {retriever} run returned no results for any of the {len(queries)} queries")
    scored = {"dataset": described, "model": report["model"], "retriever": described_retriever, "harness": harness}
    report = {
        "format": REPORT_FORMAT,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings_sha256": sha256_json(scored),
        "dataset": {**described, "queries": len(queries)},
        **report,
        "retriever": described_retriever,
        "harness": harness,
        "metrics": metrics,
        "queries_evaluated": len(per_query),
        "queries_without_results": sorted(set(qrels) - set(per_query)),
        "timings_s": timer.seconds,
        "library_versions": library_versions(),
    }
    folder = None
    if output is not None:
        model_part, retriever_part = _name_parts(report)
        name = report_folder_name(data.name, model_part, retriever_part, split, report["settings_sha256"])
        folder = Path(output) / name
    attachments = []
    if harness == "mteb":
        from embedkit.integrations.mteb import evaluate_mteb

        with timer("mteb"):
            report["mteb"], write_mteb = evaluate_mteb(
                model,
                data,
                split,
                factory=factory,
                metric=metric,
                search_params={"nprobe": nprobe, "ef_search": ef_search},
                corpus_cache=embeddings,
                task_name=mteb_task,
            )
        attachments.append(write_mteb)
    if folder is not None:
        report["folder"] = str(write_report(folder, report, run, per_query, overwrite, attachments))
    return report


def _dense_run(
    model: EmbeddingModel,
    data: BeirDataset,
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
    with timer("encode_corpus"):
        embeddings = cached_corpus_embeddings(model, data, cache_root)
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
