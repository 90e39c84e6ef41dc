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
    metadata_filter: Annotated[
        Optional[str], typer.Option("--filter", help="Only documents whose metadata match: 'year >= 2020 and ...'.")
    ] = None,
    aggregation: opt.Aggregation = None,
    sum_top: opt.SumTop = None,
    chunking: Annotated[Optional[str], typer.Option("--chunking", hidden=True)] = None,
    model: opt.Model = None,
    dtype: opt.Dtype = None,
    device: opt.Device = None,
    backend: opt.Backend = None,
    overwrite: opt.Overwrite = False,
) -> None:
    """Search an index with queries; the model defaults to the one recorded in the index's meta.json.

    Example: [bold]embedkit search -i idx/scifact -d scifact --split test -o runs/scifact.trec[/bold]
    """
    from embedkit.data.trec import looks_like_run
    from embedkit.errors import EmbedkitError
    from embedkit.outputs import check_output_file, refuse_inside_other_output

    if (dataset is None) == (queries is None):
        raise EmbedkitError("give exactly one of --dataset or --queries")
    if queries is not None:
        opt.refuse_unused({"--split": split, "--data-dir": data_dir}, "with --queries (a file's queries are all used)")
    from embedkit.index.faiss_helpers import check_whole

    check_whole(k, "-k", 1, maximum=None)  # above the corpus size: every document, as many as there are
    for flag, value, low in (("--nprobe", nprobe, 1), ("--ef-search", ef_search, 1), ("--rescore", rescore, 0)):
        check_whole(value, flag, low)  # clamped to the index's lists or vectors when searching
    if chunking is not None:
        raise EmbedkitError(
            "queries are encoded whole; chunking cuts documents: 'embedkit encode --chunking ...', recorded in the "
            "index, which search then follows",
            field="--chunking",
        )
    from embedkit.search.chunks import Aggregation

    chunk_scores = None
    if aggregation is not None or sum_top is not None:
        chunk_scores = Aggregation(aggregation or "maxp", sum_top).check()
    runtime = opt.ModelOptions(model=model, dtype=dtype, device=device, backend=backend).check()
    check_output_file(output, overwrite, looks_like_run, "TREC run")
    refuse_inside_other_output(output, "TREC run")
    from embedkit.data.beir import load_dataset, load_queries
    from embedkit.index.registry import open_index

    opened = open_index(index)  # files checked before any model loads
    params = {"nprobe": nprobe, "ef_search": ef_search, "rescore": rescore}
    params = {name: value for name, value in params.items() if value is not None}
    what = f"with a {opened.engine} index of {opened.family} rows"
    unknown = {f"--{name.replace('_', '-')}": True for name in params if name not in opened.search_parameters}
    opt.refuse_unused(unknown, what)  # each engine declares the search flags it reads
    if "rescore" not in opened.search_parameters:  # float vectors rescore a compressed FAISS index
        opt.refuse_unused({"--embeddings": embeddings}, what)
    from embedkit.search.chunks import check_aggregation

    check_aggregation(opened, chunk_scores)
    if metadata_filter is not None:
        if not opened.capabilities.filterable:
            raise EmbedkitError("needs an index that takes updates (it has no store.sqlite)", field="--filter")
        opened.store.matching_keys(metadata_filter, "--filter")  # a bad filter: one line, before the model loads
    if embeddings is not None:
        opened.attach_vectors(embeddings)
    if queries is not None:
        texts = load_queries(queries)
    else:
        data = load_dataset(dataset, data_dir=data_dir)
        texts = data.split_queries(split) if split else data.queries
    from embedkit.data.trec import write_run
    from embedkit.models.loading import load_model_from_settings
    from embedkit.search.queries import search_queries

    given = {name: value for name, value in vars(runtime).items() if value is not None}
    embedder = load_model_from_settings(opened.model_settings, **given)  # the index's model, as built
    if chunk_scores is not None:
        params["aggregation"] = chunk_scores
    if metadata_filter is not None:
        params["filter"] = metadata_filter
    run, _ = search_queries(embedder, opened, texts, k, ignore_identical_ids=ignore_identical_ids, **params)
    write_run(output, run)
    typer.echo(f"{len(run)} queries searched; run written to {output}")


def register(app: typer.Typer) -> None:
    app.command()(search)
