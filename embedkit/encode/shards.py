"""One shard file of an embeddings folder: its rows of the corpus, and how it is committed to disk.

Every executor (the single process, the Ray actors) writes a shard through ``commit_shard``, so the files and the
manifest entry are the same whichever one encoded it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from embedkit.data.beir import doc_text
from embedkit.models.chunking import CHUNK_SEPARATOR, Chunks
from embedkit.multivector import TokenRows
from embedkit.rows import format_of
from embedkit.sparse import SparseRows
from embedkit.storage import save_npy, sha256_file, write_lines
from embedkit.validation import check_id


def shard_name(index: int) -> str:
    return f"shard-{index:05d}"


def shard_rows(corpus: Any, start: int, stop: int) -> tuple[list[str], list[str]]:
    """Ids (checked: they go into ``docid`` files, one a line) and document texts of rows ``start:stop``."""
    rows = corpus[start:stop]
    if isinstance(rows, dict):  # a datasets.Dataset slice is a dict of columns
        titles = rows.get("title") or [""] * len(rows["_id"])
        docs = [{"title": t, "text": x} for t, x in zip(titles, rows["text"])]
        ids = list(rows["_id"])
    else:
        docs, ids = rows, [d["_id"] for d in rows]
    ids = [check_id(doc_id, None, None, f"_id of document {start + i}") for i, doc_id in enumerate(ids)]
    return ids, [doc_text(d) for d in docs]


VECTOR_SUFFIXES = (".npy", ".npz")  # dense rows; sparse rows (``SparseRows``) or token vectors (``TokenRows``)
SPANS_SUFFIX = ".spans.npy"  # a chunked shard's character spans, one ``[start, end)`` row per chunk


def chunk_ids(ids: list[str], counts: np.ndarray) -> list[str]:
    """``<id>#0``, ``<id>#1``, ... for each document's chunks (unique even where ids hold '#')."""
    return [f"{doc_id}{CHUNK_SEPARATOR}{n}" for doc_id, count in zip(ids, counts.tolist()) for n in range(count)]


def shard_entry(folder: Path, index: int, count: int, suffix: str = ".npy", documents: int | None = None) -> dict:
    """The manifest entry of a shard whose files are on disk; ``documents``: a chunked shard's (``count`` is its
    chunk rows), whose spans file is listed and hashed too."""
    name = shard_name(index)
    entry = {
        "index": index,
        "embeddings": f"{name}{suffix}",
        "ids": f"{name}.docid",
        "count": count,
        "sha256": sha256_file(folder / f"{name}{suffix}"),
        "ids_sha256": sha256_file(folder / f"{name}.docid"),
    }
    if documents is not None:
        entry |= {
            "documents": documents,
            "spans": f"{name}{SPANS_SUFFIX}",
            "spans_sha256": sha256_file(folder / f"{name}{SPANS_SUFFIX}"),
        }
    return entry


def commit_shard(
    folder: Path, index: int, ids: list[str], vectors: np.ndarray | SparseRows | TokenRows | Chunks
) -> dict[str, Any]:
    """Write the ids, then the vectors (each atomically): a shard's vector file existing means it is complete.

    ``Chunks`` (a chunked encode) are written as rows ``<id>#<n>`` with their character spans beside them."""
    name = shard_name(index)
    if isinstance(vectors, Chunks):  # any family's rows, one per chunk
        rows = format_of(vectors.vectors)
        write_lines(folder / f"{name}.docid", chunk_ids(ids, vectors.counts))
        save_npy(folder / f"{name}{SPANS_SUFFIX}", vectors.spans)
        rows.write(folder / f"{name}{rows.suffix}", vectors.vectors)
        entry = shard_entry(folder, index, len(vectors.vectors), rows.suffix, documents=len(ids))
        return entry | rows.stats(vectors.vectors)
    write_lines(folder / f"{name}.docid", ids)
    rows = format_of(vectors)
    rows.write(folder / f"{name}{rows.suffix}", vectors)
    return shard_entry(folder, index, len(ids), rows.suffix) | rows.stats(vectors)


def committed_shard(folder: Path, index: int, count: int) -> dict[str, Any] | None:
    """The entry of a shard this run already committed (a retried task finds it), else None."""
    name = shard_name(index)
    for suffix in VECTOR_SUFFIXES:
        if (folder / f"{name}{suffix}").is_file() and (folder / f"{name}.docid").is_file():
            if (folder / f"{name}{SPANS_SUFFIX}").is_file():  # chunk rows: counted in the docid file
                rows = len((folder / f"{name}.docid").read_text(encoding="utf-8").splitlines())
                return shard_entry(folder, index, rows, suffix, documents=count)
            return shard_entry(folder, index, count, suffix)
    return None


def remove_shard_files(folder: Path, indexes: list[int]) -> None:
    """Files of shards no manifest lists (a killed run's last shard): the executor that redoes them starts clean."""
    for index in indexes:
        for ext in ("npy", "npz", "docid", SPANS_SUFFIX[1:]):
            (folder / f"{shard_name(index)}.{ext}").unlink(missing_ok=True)
