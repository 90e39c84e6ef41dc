"""One interface over the three kinds of rows (``embedkit.protocols.Rows``): a dense float32 array, ``SparseRows`` and
``TokenRows``. Each ``RowFormat`` says how its rows are stacked, measured, and written to and read from a shard file,
so shards, resume, workers, chunking and Ray handle every family with no branch on its kind: they ask
``format_of(rows)`` (the rows in hand) or ``row_format(kind)`` (a model's or folder's recorded kind).
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from embedkit.errors import EmbedkitError
from embedkit.multivector import TokenRows
from embedkit.sparse import SparseRows
from embedkit.storage import load_npy, save_npy, save_npz


class RowFormat:
    kind: ClassVar[str]
    suffix: ClassVar[str]  # the shard file's

    def write(self, path: Path, rows: Any) -> None:
        raise NotImplementedError

    def read(self, path: Path, dim: int, mmap: bool = False) -> Any:
        raise NotImplementedError

    def stack(self, parts: Sequence[Any], dim: int, settings: dict[str, Any]) -> Any:
        raise NotImplementedError

    def shape(self, rows: Any) -> tuple[int, int]:
        return len(rows), rows.dim

    def stats(self, rows: Any) -> dict[str, Any]:
        """What a shard's manifest entry records about its rows beyond their count."""
        return {}


class DenseFormat(RowFormat):
    kind, suffix = "dense", ".npy"

    def write(self, path: Path, rows: np.ndarray) -> None:
        save_npy(path, rows)

    def read(self, path: Path, dim: int, mmap: bool = False) -> np.ndarray:
        return load_npy(path, mmap)

    def stack(self, parts: Sequence[np.ndarray], dim: int, settings: dict[str, Any]) -> np.ndarray:
        return np.concatenate(parts, axis=0) if parts else np.empty((0, dim), dtype=np.float32)

    def shape(self, rows: np.ndarray) -> tuple[int, int]:
        return rows.shape


class SparseFormat(RowFormat):
    kind, suffix = "sparse", ".npz"

    def write(self, path: Path, rows: SparseRows) -> None:
        save_npz(path, indptr=rows.indptr, indices=rows.indices, values=rows.values)

    def read(self, path: Path, dim: int, mmap: bool = False) -> SparseRows:
        arrays = _npz(path, ("indptr", "indices", "values"), "sparse")
        return _checked(path, "sparse", lambda: SparseRows(*arrays, dim))

    def stack(self, parts: Sequence[SparseRows], dim: int, settings: dict[str, Any]) -> SparseRows:
        return SparseRows.vstack(parts, dim)

    def stats(self, rows: SparseRows) -> dict[str, Any]:
        return {"nnz": rows.nnz_stats()}  # non-zeros per document: what a sparse index stores and reads


class TokenFormat(RowFormat):
    kind, suffix = "multivector", ".npz"

    def write(self, path: Path, rows: TokenRows) -> None:
        save_npz(path, offsets=rows.offsets, vectors=rows.vectors)

    def read(self, path: Path, dim: int, mmap: bool = False) -> TokenRows:
        arrays = _npz(path, ("offsets", "vectors"), "multi-vector")
        return _checked(path, "multi-vector", lambda: TokenRows(*arrays))

    def stack(self, parts: Sequence[TokenRows], dim: int, settings: dict[str, Any]) -> TokenRows:
        return TokenRows.vstack(parts, dim, settings.get("token_dtype") or "float16")

    def stats(self, rows: TokenRows) -> dict[str, Any]:
        return {"tokens": rows.token_stats()}  # tokens and stored bytes per document: what a late index holds


ROW_FORMATS: dict[str, RowFormat] = {fmt.kind: fmt for fmt in (DenseFormat(), SparseFormat(), TokenFormat())}
_BY_TYPE: dict[type, RowFormat] = {SparseRows: ROW_FORMATS["sparse"], TokenRows: ROW_FORMATS["multivector"]}


def row_format(kind: str | None) -> RowFormat:
    """The format of a recorded kind (``settings["kind"]``; absent: dense, as records before the kinds were)."""
    found = ROW_FORMATS.get(kind or "dense")
    if found is None:
        raise EmbedkitError(f"unknown kind of rows '{kind}' (known: {', '.join(ROW_FORMATS)})", field="kind")
    return found


def format_of(rows: Any) -> RowFormat:
    """The format of rows in hand (a numpy array is dense)."""
    return _BY_TYPE.get(type(rows), ROW_FORMATS["dense"])


def _npz(path: Path, names: tuple[str, ...], what: str) -> list[np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as arrays:
            return [arrays[name] for name in names]
    except (ValueError, KeyError, EOFError, OSError, zipfile.BadZipFile) as err:
        raise EmbedkitError(f"not a readable {what} shard ({str(err).splitlines()[0]})", path=path) from None


def _checked(path: Path, what: str, make: Any) -> Any:
    try:
        return make()
    except ValueError as err:
        raise EmbedkitError(f"not a readable {what} shard ({err})", path=path) from None
