"""``embedkit encode``: a corpus to a resumable folder of embedding shards."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embedkit.cli import options as opt


def encode(
    output: Annotated[Path, typer.Option("--output", "-o", help="Embeddings folder (shards + manifest.json).")],
    dataset: Annotated[Optional[str], typer.Option("--dataset", "-d", help="BEIR dataset folder or name.")] = None,
    corpus: Annotated[Optional[Path], typer.Option(help="A corpus.jsonl[.gz] file instead of a dataset.")] = None,
    data_dir: opt.DataDir = None,
    shard_size: Annotated[int, typer.Option(help="Documents per shard (the unit of resume).")] = 10_000,
    overwrite: Annotated[bool, typer.Option(help="Replace embeddings made with other settings.")] = False,
    model: opt.Model = None,
    pooling: opt.Pooling = None,
    query_prompt: opt.QueryPrompt = None,
    document_prompt: opt.DocumentPrompt = None,
    max_length: opt.MaxLength = None,
    dtype: opt.Dtype = "float32",
    device: opt.Device = None,
    batch_tokens: opt.BatchTokens = None,
) -> None:
    """Encode a corpus into .npy shards plus a manifest; a rerun resumes, or encodes nothing if all is done.

    Example: [bold]embedkit encode --dataset scifact --output emb/scifact[/bold]
    """
    from embedkit.data.beir import load_corpus, load_dataset
    from embedkit.encode.shards import encode_to_folder
    from embedkit.errors import EmbedkitError

    if (dataset is None) == (corpus is None):
        raise EmbedkitError("give exactly one of --dataset or --corpus")
    documents = load_corpus(corpus) if corpus else load_dataset(dataset, data_dir=data_dir).corpus
    embedder = opt.model_from_options(
        model, pooling, query_prompt, document_prompt, max_length, dtype, device, batch_tokens
    )
    result = encode_to_folder(embedder, documents, output, shard_size=shard_size, overwrite=overwrite)
    typer.echo(
        f"{result.manifest['count']} documents in {result.manifest['num_shards']} shards at {output} "
        f"({result.encoded_shards} shards encoded now)"
    )


def register(app: typer.Typer) -> None:
    app.command()(encode)
