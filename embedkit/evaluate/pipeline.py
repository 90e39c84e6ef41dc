"""``evaluate``: encode -> index -> search -> metrics -> report, with every score-changing setting recorded."""

from __future__ import annotations

import re
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from embedkit.data.beir import BeirDataset, load_dataset
from embedkit.data.resolve import cache_home
from embedkit.encode.shards import encode_to_folder
from embedkit.evaluate.metrics import compute_metrics
from embedkit.index.faiss_index import Index
from embedkit.models.embedding_model import EmbeddingModel
from embedkit.models.loading import load_model
from embedkit.report.environment import library_versions
from embedkit.report.writer import write_report
from embedkit.search.dense import dense_search
from embedkit.storage import sha256_json


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
) -> dict[str, Any]:
    """Evaluate a dense retriever on a BEIR dataset; returns the report (and writes it under ``output`` if given).

    Corpus embeddings are cached in ``cache_dir`` (default ``~/.cache/embedkit/embeddings``), keyed by the model
    settings and the corpus content, so a second evaluation of the same model encodes only the queries.
    """
    timer = Stopwatch()
    with timer("load_model"):
        model = model if isinstance(model, EmbeddingModel) else load_model(model)
    with timer("load_data"):
        data = dataset if isinstance(dataset, BeirDataset) else load_dataset(dataset, data_dir=data_dir)
        qrels = data.qrels(split)
        queries = data.split_queries(split)
        described = data.describe()
    cache_root = Path(cache_dir) if cache_dir else cache_home() / "embeddings"
    cache = cache_root / f"{_slug(data.name)}-{sha256_json([model.settings, described['corpus_sha256']])[:16]}"
    with timer("encode_corpus"):
        embeddings = encode_to_folder(model, data.corpus, cache)
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
    with timer("metrics"):
        metrics, per_query = compute_metrics(qrels, run)
    report = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "dataset": {**described, "split": split, "queries": len(queries)},
        "model": model.settings,
        "retriever": {
            "type": "dense",
            "factory": factory,
            "metric": metric,
            "search_params": index.search_params,
            "k": k,
            "ignore_identical_ids": ignore_identical_ids,
        },
        "metrics": metrics,
        "queries_evaluated": len(per_query),
        "queries_without_results": sorted(set(qrels) - set(per_query)),
        "embeddings_cache": {"path": str(cache), "encoded_shards": embeddings.encoded_shards},
        "device": model.device,
        "timings_s": timer.seconds,
        "library_versions": library_versions(),
    }
    if output is not None:
        folder = Path(output) / report_folder_name(data.name, model.name, split, factory)
        report["folder"] = str(write_report(folder, report, run, per_query))
    return report
