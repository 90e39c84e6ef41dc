"""``embedkit evaluate``: a model on a BEIR dataset, end to end, into a report folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embedkit.cli import options as opt
from embedkit.errors import EmbedkitError


def evaluate(
    dataset: opt.Dataset,
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder under which the report folder is written.")],
    split: Annotated[str, typer.Option(help="qrels split to evaluate.")] = "test",
    factory: Annotated[str, typer.Option(help="FAISS index_factory string.")] = "Flat",
    metric: Annotated[str, typer.Option(help="ip | l2")] = "ip",
    k: Annotated[int, typer.Option("-k", help="Hits retrieved per query.")] = 1000,
    ignore_identical_ids: Annotated[
        bool, typer.Option(help="Drop hits whose id equals the query id (ArguAna, Quora).")
    ] = False,
    nprobe: opt.Nprobe = None,
    ef_search: opt.EfSearch = None,
    data_dir: opt.DataDir = None,
    cache_dir: Annotated[Optional[Path], typer.Option(help="Where corpus embeddings are cached.")] = None,
    model: opt.Model = None,
    pooling: opt.Pooling = None,
    query_prompt: opt.QueryPrompt = None,
    document_prompt: opt.DocumentPrompt = None,
    max_length: opt.MaxLength = None,
    dtype: opt.Dtype = "float32",
    device: opt.Device = None,
    batch_tokens: opt.BatchTokens = None,
    backend: opt.Backend = "torch",
    retriever: Annotated[str, typer.Option(help="dense | bm25 | hybrid (dense and BM25 fused).")] = "dense",
    bm25_backend: Annotated[str, typer.Option(help="bm25s (pure Python) | pyserini (Lucene, Java 21).")] = "bm25s",
    bm25_k1: Annotated[float, typer.Option("--bm25-k1", help="BM25 k1 (pyserini's BEIR setting).")] = 0.9,
    bm25_b: Annotated[float, typer.Option("--bm25-b", help="BM25 b (pyserini's BEIR setting).")] = 0.4,
    fusion: Annotated[str, typer.Option(help="rrf | interpolation (min-max normalised scores).")] = "rrf",
    fusion_weights: Annotated[
        Optional[str], typer.Option(help="Interpolation weights for dense,bm25, e.g. 0.6,0.4 (default equal).")
    ] = None,
    fusion_depth: Annotated[int, typer.Option(help="Hits of each run read by the fusion.")] = 1000,
    rrf_k: Annotated[int, typer.Option(help="The k of reciprocal-rank fusion, 1/(k + rank).")] = 60,
    harness: Annotated[
        str, typer.Option(help="embedkit | mteb (also run mteb.evaluate; its result JSON goes beside the report).")
    ] = "embedkit",
    mteb_task: Annotated[
        Optional[str], typer.Option(help="MTEB task of the dataset (default: from its BEIR name).")
    ] = None,
) -> None:
    """Retrieve (dense, BM25 or hybrid) and score a BEIR split; writes run.trec, report.json, report.md, per_query.json.

    Example: [bold]embedkit evaluate --dataset scifact --output runs --retriever hybrid[/bold]
    """
    from embedkit.evaluation.pipeline import evaluate as run_evaluation
    from embedkit.report.writer import render_markdown

    weights = parse_weights(fusion_weights)
    embedder = None
    if retriever in ("dense", "hybrid"):
        embedder = opt.model_from_options(
            model, pooling, query_prompt, document_prompt, max_length, dtype, device, batch_tokens, backend
        )
    report = run_evaluation(
        embedder,
        dataset,
        split=split,
        factory=factory,
        k=k,
        output=output,
        metric=metric,
        ignore_identical_ids=ignore_identical_ids,
        nprobe=nprobe,
        ef_search=ef_search,
        data_dir=data_dir,
        cache_dir=cache_dir,
        retriever=retriever,
        bm25_backend=bm25_backend,
        k1=bm25_k1,
        b=bm25_b,
        fusion=fusion,
        fusion_weights=weights,
        fusion_depth=fusion_depth,
        rrf_k=rrf_k,
        harness=harness,
        mteb_task=mteb_task,
    )
    typer.echo(render_markdown(report))
    if "mteb" in report:
        typer.echo(f"MTEB {report['mteb']['task']} nDCG@10 = {report['mteb']['ndcg_at_10']:.4f}")
    typer.echo(f"nDCG@10 = {report['metrics']['ndcg_at_10']:.4f}; report written to {report['folder']}")


def parse_weights(text: str | None) -> list[float] | None:
    """``"0.6,0.4"`` -> ``[0.6, 0.4]``; a malformed list is a user error naming the option."""
    if text is None:
        return None
    try:
        return [float(part) for part in text.split(",")]
    except ValueError:
        raise EmbedkitError(f"not a comma-separated list of numbers: {text!r}", field="--fusion-weights") from None


def register(app: typer.Typer) -> None:
    app.command()(evaluate)
