"""``embedkit evaluate``: a model on a BEIR dataset, end to end, into a report folder."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from embedkit.cli import options as opt
from embedkit.errors import EmbedkitError


def evaluate(
    dataset: opt.Dataset,
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder under which the report folder is written.")],
    split: Annotated[str, typer.Option(help="qrels split to evaluate.")] = "test",
    retriever: Annotated[
        str,
        typer.Option(
            help="dense | bm25 | splade (a sparse model) | colbert (a multi-vector model) | hybrid (--hybrid-parts)."
        ),
    ] = "dense",
    hybrid_parts: Annotated[
        Optional[str],
        typer.Option(help="The runs a hybrid fuses: two or three of dense,bm25,splade. [default: dense,bm25]"),
    ] = None,
    sparse_model: Annotated[
        Optional[str],
        typer.Option(help="A hybrid's sparse model (folder or name) beside its dense one (--model is the dense)."),
    ] = None,
    k: Annotated[int, typer.Option("-k", help="Hits retrieved per query.")] = 1000,
    ignore_identical_ids: Annotated[
        bool, typer.Option(help="Drop hits whose id equals the query id (ArguAna, Quora).")
    ] = False,
    factory: Annotated[Optional[str], typer.Option(help="FAISS index_factory string. [default: Flat]")] = None,
    metric: Annotated[Optional[str], typer.Option(help="ip | l2 [default: ip]")] = None,
    nprobe: opt.Nprobe = None,
    ef_search: opt.EfSearch = None,
    data_dir: opt.DataDir = None,
    cache_dir: Annotated[Optional[Path], typer.Option(help="Where corpus embeddings are cached.")] = None,
    model: opt.Model = None,
    pooling: opt.Pooling = None,
    query_prompt: opt.QueryPrompt = None,
    document_prompt: opt.DocumentPrompt = None,
    max_length: opt.MaxLength = None,
    max_active_dims: opt.MaxActiveDims = None,
    pool_factor: opt.PoolFactor = None,
    token_dtype: opt.TokenDtype = None,
    chunking: opt.ChunkingMethod = None,
    chunk_size: opt.ChunkSize = None,
    chunk_overlap: opt.ChunkOverlap = None,
    aggregation: opt.Aggregation = None,
    sum_top: opt.SumTop = None,
    dtype: opt.Dtype = None,
    device: opt.Device = None,
    batch_tokens: opt.BatchTokens = None,
    backend: opt.Backend = None,
    bm25_backend: Annotated[
        Optional[str], typer.Option(help="bm25s (pure Python) | pyserini (Lucene, Java 21). [default: bm25s]")
    ] = None,
    sparse_index: opt.SparseIndex = None,
    quantization: opt.Quantization = None,
    late_index: opt.LateIndex = None,
    bm25_k1: Annotated[Optional[float], typer.Option("--bm25-k1", help="BM25 k1. [default: 0.9]")] = None,
    bm25_b: Annotated[Optional[float], typer.Option("--bm25-b", help="BM25 b. [default: 0.4]")] = None,
    fusion: Annotated[
        Optional[str], typer.Option(help="rrf | interpolation (min-max normalised scores). [default: rrf]")
    ] = None,
    fusion_weights: Annotated[
        Optional[str], typer.Option(help="Interpolation weights, one per hybrid part, e.g. 0.6,0.4 (default equal).")
    ] = None,
    fusion_depth: Annotated[
        Optional[int], typer.Option(help="Hits of each run read by the fusion. [default: 1000]")
    ] = None,
    rrf_k: Annotated[
        Optional[int], typer.Option(help="The k of reciprocal-rank fusion, 1/(k + rank). [default: 60]")
    ] = None,
    reranker: Annotated[
        Optional[str], typer.Option(help="A CrossEncoder (folder or Hub name) that re-scores the top hits.")
    ] = None,
    rerank_depth: Annotated[Optional[int], typer.Option(help="Hits per query reranked. [default: 100]")] = None,
    rerank_batch_size: Annotated[Optional[int], typer.Option(help="Pairs per forward pass. [default: 32]")] = None,
    rerank_max_length: Annotated[Optional[int], typer.Option(help="Tokens per (query, document) pair.")] = None,
    rerank_first_stage_weight: Annotated[
        Optional[float], typer.Option(help="Interpolate min-max logits with the first stage's scores. [default: 0]")
    ] = None,
    rerank_dtype: Annotated[
        Optional[str], typer.Option(help="float32 | bfloat16 | float16 for the reranker. [default: float32]")
    ] = None,
    harness: Annotated[
        str, typer.Option(help="embedkit | mteb (also run mteb.evaluate; its result JSON goes beside the report).")
    ] = "embedkit",
    mteb_task: Annotated[
        Optional[str], typer.Option(help="MTEB task of the dataset (default: from its BEIR name).")
    ] = None,
    absent_judged: Annotated[
        str,
        typer.Option(
            help="refuse | miss: qrels that judge documents absent from the corpus are refused, or scored as misses "
            "(what pytrec_eval and BEIR do silently; the report records the choice and the count).",
        ),
    ] = "refuse",
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Replace a report folder of the same name made with other settings (a rerun with the same "
            "settings replaces its own report without this).",
        ),
    ] = False,
) -> None:
    """Retrieve (dense, BM25, SPLADE, ColBERT or fused) and score a BEIR split; writes run.trec and the reports.

    Example: [bold]embedkit evaluate --dataset scifact --output runs --retriever hybrid[/bold]
    """
    from embedkit.outputs import check_parent, refuse_inside_other_output
    from embedkit.search.specs import (
        LATE_INDEXES,
        MAX_BM25_K1,
        MAX_QUANTIZATION,
        MAX_RRF_K,
        MAX_SEARCH_PARAM,
        SPARSE_INDEXES,
    )

    opt.one_of(retriever, ("dense", "bm25", "splade", "colbert", "hybrid"), "--retriever")
    opt.one_of(sparse_index, SPARSE_INDEXES, "--sparse-index")
    opt.one_of(late_index, LATE_INDEXES, "--late-index")
    opt.one_of(absent_judged, ("refuse", "miss"), "--absent-judged")
    opt.one_of(harness, ("embedkit", "mteb"), "--harness")
    opt.one_of(metric, ("ip", "l2"), "--metric")
    opt.one_of(bm25_backend, ("bm25s", "pyserini"), "--bm25-backend")
    opt.one_of(fusion, ("rrf", "interpolation"), "--fusion")
    opt.at_least(k, 1, "-k")
    opt.at_least(fusion_depth, 1, "--fusion-depth")
    if factory is not None:
        from embedkit.index import check_factory

        check_factory(factory, metric=metric or "ip", field="--factory")  # before any data is read or encoded
    opt.at_least(rrf_k, 0, "--rrf-k", maximum=MAX_RRF_K)
    opt.at_least(bm25_k1, 0, "--bm25-k1", maximum=MAX_BM25_K1)
    opt.at_least(bm25_b, 0, "--bm25-b", maximum=1)
    opt.at_least(quantization, 1, "--quantization", maximum=MAX_QUANTIZATION)
    for flag, value in (("--nprobe", nprobe), ("--ef-search", ef_search)):
        opt.at_least(value, 1, flag, maximum=MAX_SEARCH_PARAM)
    options = opt.ModelOptions.of(locals())
    parts = hybrid_part_names(hybrid_parts, retriever)
    weights = parse_weights(fusion_weights, parts)
    dense = {"--factory": factory, "--metric": metric, "--nprobe": nprobe, "--ef-search": ef_search}
    dense |= {"--aggregation": aggregation, "--sum-top": sum_top}
    if chunking in (None, "none"):
        chunk_flags = {"--aggregation": aggregation, "--sum-top": sum_top}
        opt.refuse_unused(chunk_flags, "without --chunking (they combine chunks)")
    lexical = {"--bm25-backend": bm25_backend, "--bm25-k1": bm25_k1, "--bm25-b": bm25_b}
    fused = {"--fusion": fusion, "--fusion-weights": fusion_weights, "--fusion-depth": fusion_depth, "--rrf-k": rrf_k}
    sparse = {"--sparse-index": sparse_index, "--quantization": quantization}
    if retriever == "bm25":
        opt.refuse_unused({**options.given(), **dense}, "with --retriever bm25")
    uses = set(parts) if retriever == "hybrid" else {retriever}
    within = f"with --retriever {retriever}" + (f" --hybrid-parts {','.join(parts)}" if retriever == "hybrid" else "")
    if "bm25" not in uses:
        opt.refuse_unused(lexical, within)
    approximate = late_index not in (None, "exact")  # the approximate engines take --nprobe over token vectors
    late = {"--late-index": late_index, "--nprobe": nprobe if approximate else None}
    if "colbert" in uses and approximate:
        dense = {flag: value for flag, value in dense.items() if flag != "--nprobe"}
    if "colbert" not in uses:
        opt.refuse_unused({"--late-index": late_index}, within)
    if "dense" not in uses:
        opt.refuse_unused(dense, within + " (a sparse index is --sparse-index)" * ("splade" in uses))
    if "splade" not in uses:
        opt.refuse_unused(sparse, within)
    if not {"dense", "splade"} <= uses:
        opt.refuse_unused({"--sparse-model": sparse_model}, f"{within} (it is a sparse model beside a dense one)")
    elif sparse_model is None:
        raise EmbedkitError("a hybrid of dense and splade parts needs the sparse model too", field="--sparse-model")
    if (sparse_index or "exact") != "impact":
        opt.refuse_unused(
            {"--quantization": quantization}, f"with the {sparse_index or 'exact'} sparse index (it is for impact)"
        )
    if retriever != "hybrid":
        opt.refuse_unused(fused, f"with --retriever {retriever} (fusion is for hybrid)")
    if (fusion or "rrf") == "rrf":
        opt.refuse_unused({"--fusion-weights": fusion_weights}, "with rrf fusion (weights are for interpolation)")
    if harness == "mteb" and retriever != "dense":
        raise EmbedkitError(f"the mteb harness runs dense retrieval, not {retriever}", field="--harness")
    reranking = rerank_settings(
        reranker, rerank_depth, rerank_batch_size, rerank_max_length, rerank_dtype, rerank_first_stage_weight
    )
    if harness == "mteb" and reranking is not None:
        raise EmbedkitError("the mteb harness scores a first stage only; rerank with embedkit's", field="--harness")
    options.check()  # after the refusals above: a model flag given to BM25 is refused as unused, not resolved
    retriever_spec = spec_from_flags(retriever, dense, lexical, fused, weights, sparse, parts, late)
    check_parent(output / "report")
    refuse_inside_other_output(output, "report", holds=True)  # a later --overwrite there would delete the report
    from embedkit.data.beir import load_dataset
    from embedkit.evaluation.checks import check_absent_judged

    data = load_dataset(dataset, data_dir=data_dir)  # read and check the data files before any model is loaded
    data.split_queries(split)
    data.describe()
    check_absent_judged(data, split, absent_judged)
    from embedkit.evaluation.pipeline import EvaluateOptions
    from embedkit.evaluation.pipeline import evaluate as run_evaluation
    from embedkit.report.markdown import render_markdown

    report = run_evaluation(
        options.load() if retriever != "bm25" else None,
        data,
        split,
        retriever_spec,
        output=output,
        k=k,
        cache_dir=cache_dir,
        options=EvaluateOptions(
            ignore_identical_ids, harness, mteb_task, data_dir, overwrite, reranking, absent_judged, sparse_model
        ),
    )
    typer.echo(render_markdown(report))
    if "mteb" in report:
        typer.echo(f"MTEB {report['mteb']['task']} nDCG@10 = {report['mteb']['ndcg_at_10']:.4f}")
    typer.echo(f"nDCG@10 = {report['metrics']['ndcg_at_10']:.4f}; report written to {report['folder']}")


def spec_from_flags(
    kind: str,
    dense: dict[str, Any],
    lexical: dict[str, Any],
    fused: dict[str, Any],
    weights: list[float] | None,
    sparse: dict[str, Any] | None = None,
    parts: tuple[str, ...] = ("dense", "bm25"),
    late: dict[str, Any] | None = None,
) -> Any:
    """The ``Retriever`` the flags describe; each flag sets the spec field of the same name (``--bm25-k1`` is
    ``BM25.k1``, ``--fusion-depth`` is ``Fusion.depth``), and a flag not given keeps the field's default."""
    from embedkit.search.retriever import BM25, Dense, Fusion, Hybrid, LateInteraction, Sparse

    def given(flags: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        fields = {flag.removeprefix("--").removeprefix(prefix).replace("-", "_"): v for flag, v in flags.items()}
        return {name: value for name, value in fields.items() if value is not None}

    fusion = given({**fused, "--fusion-method": fused["--fusion"], "--fusion-weights": weights}, "fusion-")
    fusion.pop("fusion", None)
    dense_spec, bm25_spec = Dense(**given(dense)), BM25(**given(lexical, "bm25-"))
    sparse_spec = Sparse(**{k.removeprefix("sparse_"): v for k, v in given(sparse or {}).items()})
    late_spec = LateInteraction(**{k.removeprefix("late_"): v for k, v in given(late or {}).items()})
    specs = {"dense": dense_spec, "bm25": bm25_spec, "splade": sparse_spec, "colbert": late_spec}
    if kind == "hybrid":
        chosen = {name: spec if name in parts else None for name, spec in specs.items()}
        return Hybrid(chosen["dense"], chosen["bm25"], Fusion(**fusion), sparse=chosen["splade"]).check()
    return specs[kind].check()


def rerank_settings(
    model: str | None,
    depth: int | None,
    batch_size: int | None,
    max_length: int | None,
    dtype: str | None,
    first_stage_weight: float | None = None,
) -> Any:
    """The reranking stage the flags describe (None without --reranker), checked before torch loads."""
    flags = {
        "--rerank-depth": depth,
        "--rerank-batch-size": batch_size,
        "--rerank-max-length": max_length,
        "--rerank-first-stage-weight": first_stage_weight,
    }
    if model is None:
        opt.refuse_unused({**flags, "--rerank-dtype": dtype}, "without --reranker")
        return None
    from embedkit.reranking.settings import RerankSettings, resolve_cross_encoder

    given = {flag.removeprefix("--rerank-").replace("-", "_"): value for flag, value in flags.items()}
    settings = RerankSettings(model, **{k: v for k, v in given.items() if v is not None}, dtype=dtype or "float32")
    settings.check("--rerank-")
    resolve_cross_encoder(model, "--reranker", late_interaction=True)
    return settings


HYBRID_PARTS = ("dense", "bm25", "splade")


def hybrid_part_names(text: str | None, retriever: str) -> tuple[str, ...]:
    """``"bm25,splade"`` -> the parts in fusion order (dense, bm25, splade); two or three, each once."""
    if text is None:
        return ("dense", "bm25")
    if retriever != "hybrid":
        raise EmbedkitError(f"not used with --retriever {retriever} (it is for hybrid)", field="--hybrid-parts")
    names = [name.strip() for name in text.split(",")]
    unknown = [name for name in names if name not in HYBRID_PARTS]
    if unknown or len(set(names)) != len(names) or len(names) < 2:
        raise EmbedkitError(
            f"give two or three of {','.join(HYBRID_PARTS)}, each once, not {text!r}", field="--hybrid-parts"
        )
    return tuple(name for name in HYBRID_PARTS if name in names)


def parse_weights(text: str | None, parts: tuple[str, ...] = ("dense", "bm25")) -> list[float] | None:
    """``"0.6,0.4"`` -> ``[0.6, 0.4]``, one per part; a malformed list is a user error naming the option."""
    if text is None:
        return None
    try:
        weights = [float(part) for part in text.split(",")]
    except ValueError:
        raise EmbedkitError(f"not a comma-separated list of numbers: {text!r}", field="--fusion-weights") from None
    if len(weights) != len(parts) or any(not math.isfinite(w) or w < 0 for w in weights) or sum(weights) == 0:
        raise EmbedkitError(
            f"give {len(parts)} weights >= 0 for {','.join(parts)}, not {text!r}", field="--fusion-weights"
        )
    return weights


def register(app: typer.Typer) -> None:
    app.command()(evaluate)
