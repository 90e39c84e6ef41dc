"""``embedkit evaluate``: a model on a BEIR dataset, end to end, into a report folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embedkit.cli import options as opt


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
) -> None:
    """Encode, index, search and score a BEIR split; writes run.trec, report.json, report.md, per_query.json.

    Example: [bold]embedkit evaluate --dataset scifact --output runs[/bold]
    """
    from embedkit.evaluate.pipeline import evaluate as run_evaluation
    from embedkit.report.writer import render_markdown

    embedder = opt.model_from_options(
        model, pooling, query_prompt, document_prompt, max_length, dtype, device, batch_tokens
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
    )
    typer.echo(render_markdown(report))
    typer.echo(f"nDCG@10 = {report['metrics']['ndcg_at_10']:.4f}; report written to {report['folder']}")


def register(app: typer.Typer) -> None:
    app.command()(evaluate)
