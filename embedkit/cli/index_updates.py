"""``embedkit index add|upsert|delete|compact|check``: change an index folder in place, one transaction a command.

The first change gives the folder its store (``store.sqlite``: ids, metadata, rows; ``--fields`` declares which
metadata fields filters may use); readers of the snapshot (pyserini, older embedkit) keep opening the folder. Any
family's index takes changes: a FAISS index in place, a sparse or multi-vector one beside its snapshot.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from embedkit.cli import options as opt

IndexFolder = Annotated[Path, typer.Option("--index", "-i", help="Index folder written by 'embedkit index'.")]
Corpus = Annotated[
    Optional[Path],
    typer.Option(help="JSONL documents: _id, text, title, a 'metadata' object; encoded by the index's model."),
]
Dataset = Annotated[
    Optional[str], typer.Option("--dataset", "-d", help="A BEIR dataset folder or name: its corpus.jsonl[.gz].")
]
Embeddings = Annotated[
    Optional[Path], typer.Option("--embeddings", "-e", help="An embeddings folder of the index's model (no metadata).")
]
Fields = Annotated[
    Optional[str],
    typer.Option(help="Filterable metadata fields, declared when the store is made: 'year:int,source:text'."),
]


def read_documents(path: Path) -> tuple[list[str], list[str], list[dict[str, Any] | None]]:
    """Ids, texts and metadata of a JSONL corpus; a repeated id or a 'metadata' that is not an object is refused
    with its line."""
    from embedkit.data.beir import doc_text
    from embedkit.data.jsonl import read_records
    from embedkit.errors import EmbedkitError

    ids, texts, metadata, seen = [], [], [], {}
    for number, record in read_records(path, required=("_id", "text")):
        if record["_id"] in seen:
            message = f"duplicate document id '{record['_id']}' (first seen on line {seen[record['_id']]})"
            raise EmbedkitError(message, path=path, line=number, field="_id")
        meta = record.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise EmbedkitError("expected a JSON object", path=path, line=number, field="metadata")
        seen[record["_id"]] = number
        ids.append(record["_id"])
        texts.append(doc_text(record))
        metadata.append(meta)
    if not ids:
        raise EmbedkitError("no documents", path=path)
    return ids, texts, metadata


def _open(index: Path, fields: str | None):
    from embedkit.index.filters import parse_fields
    from embedkit.index.registry import open_live

    return open_live(index, fields=None if fields is None else parse_fields(fields))


def _write(index: Path, corpus: Path | None, dataset: str | None, embeddings: Path | None, fields: str | None,
           data_dir: Path | None, replace: bool) -> None:  # fmt: skip
    from embedkit.errors import EmbedkitError

    if sum(given is not None for given in (corpus, dataset, embeddings)) != 1:
        raise EmbedkitError("give the documents as --corpus FILE, --dataset NAME or --embeddings FOLDER (one of them)")
    if dataset is not None:
        from embedkit.data.jsonl import find_file
        from embedkit.data.resolve import resolve_dataset

        corpus = find_file(resolve_dataset(dataset, data_dir), "corpus")
    live = _open(index, fields)
    write = live.upsert if replace else live.add
    if corpus is not None:
        ids, texts, metadata = read_documents(corpus)
        from embedkit.models.loading import load_model_from_settings

        model = load_model_from_settings(live.model_settings)  # the model that encoded the index
        version = write(ids, texts=texts, metadata=metadata, model=model)
    else:
        from embedkit.encode.folder import EmbeddingsFolder

        folder = EmbeddingsFolder.open(embeddings)
        if not folder.complete:
            raise EmbedkitError("the embeddings are incomplete", path=embeddings)
        ids = folder.ids()
        version = write(ids, folder.embeddings(), model_settings=folder.settings)
    typer.echo(f"{len(ids)} documents {'upserted' if replace else 'added'}; {len(live)} in {index} (version {version})")


def add(index: IndexFolder, corpus: Corpus = None, dataset: Dataset = None, embeddings: Embeddings = None,
        fields: Fields = None, data_dir: opt.DataDir = None) -> None:  # fmt: skip
    """Add documents whose ids are not in the index yet (an id already there is refused: use upsert).

    Example: [bold]embedkit index add -i idx/scifact --corpus new.jsonl --fields year:int,source:text[/bold]
    """
    _write(index, corpus, dataset, embeddings, fields, data_dir, replace=False)


def upsert(index: IndexFolder, corpus: Corpus = None, dataset: Dataset = None, embeddings: Embeddings = None,
           fields: Fields = None, data_dir: opt.DataDir = None) -> None:  # fmt: skip
    """Add documents, replacing those whose ids are in the index already (one transaction)."""
    _write(index, corpus, dataset, embeddings, fields, data_dir, replace=True)


def delete(
    index: IndexFolder,
    ids: Annotated[Path, typer.Option("--ids", help="A file of document ids, one a line.")],
    fields: Fields = None,
) -> None:
    """Delete documents by id (an id not in the index is refused; nothing is deleted then)."""
    from embedkit.data.jsonl import read_lines_of, require_file
    from embedkit.errors import EmbedkitError
    from embedkit.validation import check_id

    require_file(ids)
    wanted = [check_id(line.strip(), ids, number, "id") for number, line in read_lines_of(ids) if line.strip()]
    if not wanted:
        raise EmbedkitError("no ids", path=ids)
    live = _open(index, fields)
    version = live.delete(wanted)
    typer.echo(f"{len(wanted)} documents deleted; {len(live)} left in {index} (version {version})")


def compact(index: IndexFolder) -> None:
    """Rebuild the live documents into a new snapshot (tombstones dropped), swapped in whole."""
    from embedkit.index.registry import load_live

    record = load_live(index).compact()
    typer.echo(f"compacted {index}: {record['documents']} documents, {record['removed']} removed")


def check(index: IndexFolder) -> None:
    """Whether the store, the snapshot and the searched vectors agree; prints a JSON report, exit 1 if not."""
    from embedkit.index.registry import load_live

    report = load_live(index).check()
    typer.echo(json.dumps(report, indent=2))
    if not report["ok"]:
        raise typer.Exit(1)


def register(group: typer.Typer) -> None:
    for command in (add, upsert, delete, compact, check):
        group.command()(command)
