"""``evaluate``: retrieve (dense, BM25 or both fused), score, report; every score-changing setting recorded."""

from __future__ import annotations

import re
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from embedkit.data.beir import BeirDataset, load_dataset
from embedkit.data.trec import sort_run
from embedkit.encode.cache import default_cache_root
from embedkit.environment import library_versions
from embedkit.errors import EmbedkitError
from embedkit.evaluation.checks import check_absent_judged, complete_run, data_rules
from embedkit.evaluation.metrics import compute_metrics, recall_curve
from embedkit.integrations.mteb import evaluate_mteb
from embedkit.models.embedding_model import EmbeddingModel
from embedkit.protocols import Run
from embedkit.report.writer import REPORT_FORMAT, write_report
from embedkit.reranking.settings import RerankSettings
from embedkit.search.bm25 import bm25_searcher, drop_identical
from embedkit.search.dense import DenseRetrieval
from embedkit.search.fusion import fuse
from embedkit.search.late_interaction import LateInteractionRetrieval
from embedkit.search.retriever import Retriever, bm25_part, components, dense_part, retriever_of, to_dict
from embedkit.search.sparse import SparseRetrieval
from embedkit.storage import sha256_json
from embedkit.validation import check_whole

HARNESSES = ("embedkit", "mteb")


@dataclass(frozen=True)
class EvaluateOptions:
    """What else an evaluation can do: BEIR's identical-id rule, MTEB's harness beside embedkit's, where datasets
    are found by name, whether another report of the same name may be replaced, and a reranking second stage."""

    ignore_identical_ids: bool = False  # drop hits whose id equals the query id (ArguAna, Quora)
    harness: str = "embedkit"  # "mteb": also run mteb.evaluate on the same model, vectors and index
    mteb_task: str | None = None  # MTEB's name of the dataset (default: from its BEIR name)
    data_dir: str | Path | None = None
    overwrite: bool = False
    reranker: RerankSettings | None = None  # a cross-encoder that re-scores the first stage's top hits
    absent_judged: str = "refuse"  # qrels judging documents the corpus lacks: "refuse", or "miss" to score as misses
    sparse_model: Any = None  # a hybrid's sparse part's model (or its name) beside the dense ``model``
    part_models: dict[str, Any] | None = None  # loaded models by part name ("splade", "colbert-2"), over the spec's


def _slug(text: str) -> str:
    """A readable file-name part: letters and digits of any script kept, anything else one dash."""
    return re.sub(r"[^\w.-]+", "-", text).strip("-.") or "x"


def report_folder_name(dataset: str, model: str, retriever: str, split: str, settings_sha256: str) -> str:
    """``<dataset>__<model>__<retriever>__<split>__<hash>``: a readable part, then 8 hex digits of the hash of every
    setting that changes a score, so runs that differ in any of them never share a folder."""
    readable = "__".join(_slug(part) for part in (dataset, Path(model).name or model, retriever, split))
    return f"{readable}__{settings_sha256[:8]}"


def _name_parts(spec: Retriever, model: dict[str, Any] | None, reranker: RerankSettings | None) -> tuple[str, str]:
    """(model, retriever) parts of the report folder name; a dense run keeps its historic ``model__factory``."""
    parts = {"dense": lambda: (model["model"], spec.factory), "bm25": lambda: ("bm25", spec.backend)}.get(spec.type)
    if parts is not None:
        parts = parts()
    elif spec.type != "hybrid":
        parts = model["model"], spec.label
    else:
        fused = "+".join(part.label for part in spec.components.values())
        parts = (model["model"] if model else "bm25"), f"{fused}-{spec.fusion.method}"
    if reranker is None:
        return parts
    return parts[0], f"{parts[1]}+rerank-{Path(reranker.model).name}@{reranker.depth}"


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
    retriever: Retriever | str = "dense",
    *,
    output: str | Path | None = None,
    k: int = 1000,
    cache_dir: str | Path | None = None,
    options: EvaluateOptions | None = None,
) -> dict[str, Any]:
    """Evaluate a retriever on a BEIR dataset; returns the report (and writes its folder under ``output`` if given).

    ``retriever`` is a ``Dense``, ``BM25``, ``Sparse``, ``LateInteraction`` or ``Hybrid`` spec
    (``embedkit.search.retriever``) or the name of one with its defaults. ``model`` is the dense, sparse or
    multi-vector model; a hybrid with a dense and a sparse part
    takes the sparse one as ``options.sparse_model``. Corpus embeddings and Lucene indexes are cached in
    ``cache_dir`` (default ``~/.cache/embedkit/embeddings``). The report folder is written as one unit and swapped
    in whole; its name ends in a hash of every setting that changes a score, so a rerun with the same settings
    replaces its own earlier report and any other existing folder is kept unless ``options.overwrite``.
    """
    options = options or EvaluateOptions()
    spec = retriever_of(retriever)
    if k is None:
        raise EmbedkitError("must be a whole number >= 1, not None", field="k")
    check_whole(k, "k", minimum=1)
    if options.harness not in HARNESSES:
        raise EmbedkitError(f"unknown harness '{options.harness}' (choose from embedkit, mteb)", field="harness")
    if options.harness == "mteb" and spec.type != "dense":
        raise EmbedkitError(f"the mteb harness runs dense retrieval, not '{spec.type}'", field="harness")
    timer = Stopwatch()
    with timer("load_data"):
        data = dataset if isinstance(dataset, BeirDataset) else load_dataset(dataset, data_dir=options.data_dir)
        qrels, queries = data.qrels(split), data.split_queries(split)
        described = {**data.describe(), "split": split, "qrels_sha256": data.qrels_sha256(split)}
        absent = check_absent_judged(data, split, options.absent_judged, "absent_judged")
    with timer("load_model") if any(part.family for part in components(spec).values()) else nullcontext():
        retrievals = _model_retrievals(spec, model, options.sparse_model, cache_dir, options.part_models or {})
    spec = _with_aggregation(spec, retrievals, options.harness)
    encoded = next(iter(retrievals.values()), None)  # the run's model's retrieval (dense, or sparse alone)
    fusion = spec.fusion if spec.type == "hybrid" else None
    wanted = max(k, fusion.depth) if fusion else k  # a fusion reads each part to its depth
    depth = min(int(wanted), len(data.corpus))  # a k above the corpus size returns the whole corpus
    runs, retrieval = _retrieve(spec, retrievals, data, queries, depth, cache_dir, options.ignore_identical_ids, timer)
    retrieval["k"] = k
    run = None if fusion else runs[spec.type]
    if fusion:
        with timer("fuse"):
            run = fuse(
                [runs[name] for name in spec.components],
                fusion.method,
                weights=fusion.weights,
                depth=fusion.depth,
                k=k,
                rrf_k=fusion.rrf_k,
            )
    first_stage, reranked_by = None, None
    if options.reranker is not None:
        first_stage = compute_metrics(qrels, run)[0]
        with timer("rerank"):
            scorer, rerank_run = _reranker(options.reranker, cache_dir)
            run = rerank_run(scorer, run, data)
        reranked_by = {**scorer.describe(), "pairs_scored": scorer.pairs_scored, "device": scorer.device}
    run, without_results = complete_run(sort_run(run), queries)
    if len(without_results) == len(queries):
        raise EmbedkitError(f"the {spec.type} run returned no results for any of the {len(queries)} queries")
    with timer("metrics"):
        metrics, per_query = compute_metrics(qrels, run)
    model_settings = None if encoded is None else encoded.model.settings
    scored = {
        "dataset": described,
        "model": model_settings,
        "retriever": to_dict(spec),
        "k": k,
        "ignore_identical_ids": options.ignore_identical_ids,
        "harness": options.harness,
    }
    second = retrievals.get("splade") if len(retrievals) > 1 and spec.parts is None else None
    if second is not None:  # a hybrid's sparse model beside the dense one (the older form of a hybrid)
        scored["sparse_model"] = second.model.settings
    others = {name: r.model.settings for name, r in retrievals.items() if r is not encoded}
    if fusion and spec.parts is not None and others:  # each further part's own model
        scored["part_models"] = others
    if absent["documents"]:  # only then, so reports on complete qrels keep their settings hash
        scored["absent_judged"] = absent
    if reranked_by is not None:  # only then, so reports without a reranker keep their settings hash
        scored["reranker"] = {key: reranked_by[key] for key in ("model", "weights_sha256", "depth", "max_length")}
        scored["reranker"]["dtype"] = reranked_by["dtype"]
    report: dict[str, Any] = {
        "format": REPORT_FORMAT,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings_sha256": sha256_json(scored),
        "dataset": {**described, "queries": len(queries)},
        "model": model_settings,
        "retriever": to_dict(spec),
        "retrieval": retrieval,
        "harness": options.harness,
        "metrics": metrics,
        "recall_curve": recall_curve(qrels, run),
        "queries_evaluated": len(per_query),
        "queries_without_results": without_results,
        "absent_judged": absent,
        **data_rules(),
    }
    if second is not None:
        report["sparse_model"] = second.model.settings
    if "part_models" in scored:
        report["part_models"] = scored["part_models"]
    if encoded is not None:
        embeddings = encoded.embeddings(data)
        report["embeddings_cache"] = {"path": str(embeddings.path), "encoded_shards": embeddings.encoded_shards}
        report["device"] = encoded.model.device
    if fusion:
        report["component_metrics"] = {name: compute_metrics(qrels, part)[0] for name, part in runs.items()}
        report["component_recall_curves"] = {name: recall_curve(qrels, part) for name, part in runs.items()}
    if reranked_by is not None:
        report["reranker"] = reranked_by
        report["component_metrics"] = {**report.get("component_metrics", {}), "first stage": first_stage}
    attachments = []
    if options.harness == "mteb":
        with timer("mteb"):
            spec_dense = encoded.spec
            report["mteb"], write_mteb = evaluate_mteb(
                encoded.model,
                data,
                split,
                factory=spec_dense.factory,
                metric=spec_dense.metric,
                search_params={"nprobe": spec_dense.nprobe, "ef_search": spec_dense.ef_search},
                corpus_cache=encoded.embeddings(data),
                task_name=options.mteb_task,
            )
        attachments.append(write_mteb)
    report |= {"timings_s": timer.seconds, "library_versions": library_versions()}
    if output is not None:
        parts = _name_parts(spec, model_settings, options.reranker)
        name = report_folder_name(data.name, *parts, split, report["settings_sha256"])
        report["folder"] = str(
            write_report(Path(output) / name, report, run, per_query, options.overwrite, attachments)
        )
    return report


def _with_aggregation(spec: Retriever, retrievals: dict[str, Any], harness: str) -> Retriever:
    """The spec as run: a chunked model's dense part aggregates by MaxP unless told otherwise (and the report says
    so); an aggregation without chunks is refused, as is MTEB's harness, which encodes documents whole."""
    dense, retrieval = dense_part(spec), retrievals.get("dense")
    if dense is None or retrieval is None:
        return spec
    if retrieval.model.chunking is None:
        if dense.aggregation_setting is not None:
            raise EmbedkitError(
                "combines the scores of a document's chunks; this model encodes documents whole (give it a chunking)",
                field="aggregation",
            )
        return spec
    if harness == "mteb":
        message = "the mteb harness encodes documents whole; evaluate chunks with embedkit's"
        raise EmbedkitError(message, field="harness")
    if dense.aggregation is not None:
        return spec
    resolved = replace(dense, aggregation="maxp")
    retrieval.spec = resolved
    if spec.type == "dense":
        return resolved
    if spec.parts is None:
        return replace(spec, dense=resolved)
    return replace(spec, parts=tuple(resolved if part is dense else part for part in spec.parts))


RETRIEVALS = {"dense": DenseRetrieval, "sparse": SparseRetrieval, "multivector": LateInteractionRetrieval}


def _model_retrievals(
    spec: Retriever, model: Any, sparse_model: Any, cache_dir: str | Path | None, part_models: dict[str, Any]
) -> dict[str, DenseRetrieval | SparseRetrieval | LateInteractionRetrieval]:
    """The spec's model parts by run name, the run's model's first. A part searches the model given for it by name
    (``part_models``), else the one its spec names, else ``model``; in the older hybrid form a sparse part beside a
    dense one searches ``sparse_model``."""
    parts = {name: part for name, part in components(spec).items() if part.family}
    legacy = spec.type == "hybrid" and spec.parts is None and "dense" in parts and "splade" in parts
    if sparse_model is not None and not legacy:
        raise EmbedkitError("a second model is for a hybrid's sparse part beside a dense part", field="sparse_model")
    if legacy and sparse_model is None:
        raise EmbedkitError("a hybrid of dense and splade parts needs the sparse model too", field="sparse_model")
    unknown = set(part_models) - set(parts)
    if unknown:
        raise EmbedkitError(f"no model part named '{min(unknown)}' (parts: {', '.join(parts)})", field="part_models")
    if not parts:
        return {}
    loaded: dict[Any, Any] = {}
    retrievals: dict[str, DenseRetrieval | SparseRetrieval | LateInteractionRetrieval] = {}
    for name, part in parts.items():
        given = part_models.get(name) or (sparse_model if legacy and name == "splade" else part.model or model)
        key = given if isinstance(given, (str, Path)) or given is None else id(given)
        if key not in loaded:
            loaded[key] = _load_model(given) if given is None or isinstance(given, (str, Path)) else given
        retrievals[name] = RETRIEVALS[part.family](loaded[key], part, cache_dir)
    return retrievals


def _retrieve(
    spec: Retriever,
    retrievals: dict[str, DenseRetrieval | SparseRetrieval | LateInteractionRetrieval],
    data: BeirDataset,
    queries: dict[str, str],
    k: int,
    cache_dir: str | Path | None,
    ignore_identical_ids: bool,
    timer: Stopwatch,
) -> tuple[dict[str, Run], dict[str, Any]]:
    """The runs the spec needs ("dense", "bm25", "splade") and what the report records of how they were made."""
    runs: dict[str, Run] = {}
    retrieval: dict[str, Any] = {"k": k, "ignore_identical_ids": ignore_identical_ids}
    for position, (name, encoded) in enumerate(retrievals.items()):
        stage = "" if position == 0 else f"_{name}"  # the first keeps the stage names reports have always had
        with timer(f"encode_corpus{stage}"):
            encoded.embeddings(data)
        with timer(f"build_index{stage}"):
            index = encoded.index(data)
        with timer(f"search{stage}"):
            runs[name] = encoded.search(data, queries, k, ignore_identical_ids)
        if position == 0:
            retrieval["search_params"] = dict(getattr(index, "search_params", {}))
        retrieval |= encoded.costs(data)
    lexical_spec = bm25_part(spec)
    if lexical_spec is not None:
        lucene_dir = Path(cache_dir or default_cache_root()) / f"lucene-{data.corpus_sha256[:16]}"
        with timer("build_bm25"):
            lexical = bm25_searcher(
                data, lexical_spec.backend, k1=lexical_spec.k1, b=lexical_spec.b, index_dir=lucene_dir
            )
        with timer("search_bm25"):
            run = sort_run(lexical.search(queries, k + 1 if ignore_identical_ids else k))
            runs["bm25"] = drop_identical(run, k) if ignore_identical_ids else run
        retrieval["bm25"] = lexical.settings
    return runs, retrieval


def _load_model(name: str | Path | None) -> EmbeddingModel:
    """Loads a model by name; imported here because it loads torch and sentence-transformers, which a BM25
    evaluation never needs (it starts in a second instead of ten)."""
    from embedkit.models.loading import load_model

    return load_model(name)


def _reranker(settings: RerankSettings, cache_dir: str | Path | None) -> tuple[Any, Any]:
    """The second stage (a cross-encoder, or a multi-vector model's MaxSim over its cached token vectors) and the
    function that reranks a run with it; imported here for the same reason."""
    from embedkit.reranking.late_reranker import LateInteractionReranker, is_late_reranker
    from embedkit.reranking.reranker import CrossEncoderReranker, rerank_run

    if is_late_reranker(settings):
        return LateInteractionReranker(settings, cache_dir), lambda scorer, run, data: scorer.rerank_run(run, data)
    return CrossEncoderReranker(settings), rerank_run
