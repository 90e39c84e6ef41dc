"""``embedkit search``: queries against an index folder into a TREC run file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embedkit.cli import options as opt


def search(
    index: Annotated[Path, typer.Option("--index", "-i", help="Index folder written by 'embedkit index'.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="TREC run file to write.")],
    dataset: Annotated[Optional[str], typer.Option("--dataset", "-d", help="BEIR dataset folder or name.")] = None,
    queries: Annotated[Optional[Path], typer.Option(help="A queries.jsonl[.gz] file instead of a dataset.")] = None,
    split: Annotated[Optional[str], typer.Option(help="Only the queries judged in this split.")] = None,
    data_dir: opt.DataDir = None,
    k: Annotated[int, typer.Option("-k", help="Hits per query.")] = 1000,
    ignore_identical_ids: Annotated[bool, typer.Option(help="Drop hits whose id equals the query id.")] = False,
    nprobe: opt.Nprobe = None,
    ef_search: opt.EfSearch = None,
    rescore: opt.Rescore = None,
    embeddings: Annotated[
        Optional[Path], typer.Option("--embeddings", "-e", help="Float vectors for --rescore (default: meta.json's).")
    ] = None,
    model: opt.Model = None,
    dtype: opt.Dtype = "float32",
    device: opt.Device = None,
    backend: opt.Backend = "torch",
) -> None:
    """Search an index with queries; the model defaults to the one recorded in the index's meta.json.

    Example: [bold]embedkit search -i idx/scifact -d scifact --split test -o runs/scifact.trec[/bold]
    """
    from embedkit.data.beir import load_dataset, load_queries
    from embedkit.errors import EmbedkitError
    from embedkit.index.sharded import load_index
    from embedkit.models.loading import load_model
    from embedkit.search.dense import dense_search
    from embedkit.search.trec import write_run

    if (dataset is None) == (queries is None):
        raise EmbedkitError("give exactly one of --dataset or --queries")
    opened = load_index(index)  # an index folder, or a sharded one (--num-shards)
    if embeddings is not None:
        opened.attach_vectors(embeddings)
    if queries is not None:
        texts = load_queries(queries)
    else:
        data = load_dataset(dataset, data_dir=data_dir)
        texts = data.split_queries(split) if split else data.queries
    built_with = opened.meta.get("model") or {}
    embedder = load_model(
        model or built_with.get("model"),
        query_prompt=built_with.get("query_prompt"),
        document_prompt=built_with.get("document_prompt"),
        max_length=built_with.get("max_length"),
        normalize=built_with.get("normalize"),
        dtype=dtype,
        device=device,
        backend=backend,
    )
    opened.check_model(embedder.settings)
    run = dense_search(
        embedder,
        opened,
        texts,
        k=k,
        ignore_identical_ids=ignore_identical_ids,
        nprobe=nprobe,
        ef_search=ef_search,
        rescore=rescore,
    )
    write_run(output, run)
    typer.echo(f"{len(run)} queries searched; run written to {output}")


def register(app: typer.Typer) -> None:
    app.command()(search)
