"""``embedkit index``: an embeddings folder to a FAISS index folder (pyserini layout + meta.json)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from embedkit.cli import options as opt


def index(
    embeddings: Annotated[Path, typer.Option("--embeddings", "-e", help="Folder written by 'embedkit encode'.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Index folder to write.")],
    factory: Annotated[str, typer.Option(help="FAISS index_factory string: Flat, IVF1024,Flat, HNSW32, ...")] = "Flat",
    metric: Annotated[str, typer.Option(help="ip | l2")] = "ip",
    train_size: Annotated[int, typer.Option(help="Vectors sampled to train IVF/PQ.")] = 1_000_000,
    nprobe: opt.Nprobe = None,
    ef_search: opt.EfSearch = None,
) -> None:
    """Build a FAISS index from an embeddings folder (GPU when FAISS sees one).

    Example: [bold]embedkit index -e emb/scifact -o idx/scifact-hnsw --factory HNSW32 --ef-search 128[/bold]
    """
    from embedkit.encode.shards import EmbeddingsFolder
    from embedkit.errors import EmbedkitError
    from embedkit.index.faiss_index import Index

    folder = EmbeddingsFolder.open(embeddings)
    if not folder.complete:
        raise EmbedkitError("the embeddings are incomplete; rerun 'embedkit encode' to finish them", path=embeddings)
    built = Index.build(
        folder.embeddings(),
        folder.ids(),
        factory=factory,
        metric=metric,
        train_size=train_size,
        model_settings=folder.settings,
        nprobe=nprobe,
        ef_search=ef_search,
    )
    built.save(output)
    typer.echo(f"{len(built)} vectors indexed as '{factory}' at {output}")


def register(app: typer.Typer) -> None:
    app.command()(index)
