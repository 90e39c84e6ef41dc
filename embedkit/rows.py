"""One interface over the three kinds of rows (``embedkit.protocols.Rows``): a dense float32 array, ``SparseRows`` and
``TokenRows``. Each ``RowFormat`` says how its rows are stacked, measured, and written to and read from a shard file,
so shards, resume, workers, chunking and Ray handle every family with no branch on its kind: they ask
``format_of(rows)`` (the rows in hand) or ``row_format(kind)`` (a model's or folder's recorded kind).
"""

from __future__ import annotations

import base64
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from embedkit.errors import EmbedkitError
from embedkit.multivector import TokenRows, maxsim
from embedkit.sparse import SparseRows
from embedkit.storage import load_npy, save_npy, save_npz


class RowFormat:
    kind: ClassVar[str]
    suffix: ClassVar[str]  # the shard file's
    positive_only: ClassVar[bool] = False  # a score of 0 or less is no hit (a sparse product sharing no term)

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

    def take(self, rows: Any, positions: Sequence[int]) -> Any:
        return rows.take(positions)

    def to_blobs(self, rows: Any) -> list[bytes]:
        """Each row as bytes (a living index's store keeps one per document)."""
        raise NotImplementedError

    def from_blobs(self, blobs: Sequence[bytes], dim: int, settings: dict[str, Any]) -> Any:
        raise NotImplementedError

    def score(self, queries: Any, documents: Any) -> np.ndarray:
        """Exact scores ``[queries, documents]`` in float32: the family's own similarity, the reference every
        approximate engine of the family is measured against."""
        raise NotImplementedError

    def to_json(self, rows: Any, encoding: str = "float") -> list[Any]:
        """Each row as JSON for an HTTP answer (``/v1/embeddings``): only dense rows have a ``base64`` form."""
        if encoding != "float":
            raise EmbedkitError(f"a {self.kind} model's vectors are given as 'float' only", field="encoding_format")
        return [self.row_json(rows, i) for i in range(len(rows))]

    def row_json(self, rows: Any, i: int) -> Any:
        raise NotImplementedError

    def check(self, rows: Any, count: int, dim: int, field: str = "vectors") -> Any:
        """Rows given for ``count`` documents of ``dim`` dimensions, refused with one line otherwise."""
        if format_of(rows) is not self or len(rows) != count or self.shape(rows)[1] != dim:
            raise EmbedkitError(f"{count} documents need {count} {self.kind} rows of {dim} dimensions", field=field)
        return rows


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

    def take(self, rows: np.ndarray, positions: Sequence[int]) -> np.ndarray:
        return rows[np.asarray(positions, dtype=np.int64)]

    def to_json(self, rows: np.ndarray, encoding: str = "float") -> list[Any]:
        if encoding == "base64":  # OpenAI's: little-endian float32 bytes
            return [base64.b64encode(row.astype("<f4").tobytes()).decode("ascii") for row in rows]
        return [row.tolist() for row in rows]

    def to_blobs(self, rows: np.ndarray) -> list[bytes]:
        return [np.ascontiguousarray(row, dtype=np.float32).tobytes() for row in rows]

    def from_blobs(self, blobs: Sequence[bytes], dim: int, settings: dict[str, Any]) -> np.ndarray:
        if not blobs:
            return np.empty((0, dim), dtype=np.float32)
        return np.stack([np.frombuffer(blob, dtype=np.float32) for blob in blobs])

    def score(self, queries: np.ndarray, documents: np.ndarray) -> np.ndarray:
        return (np.asarray(queries, np.float32) @ np.asarray(documents, np.float32).T).astype(np.float32)

    def check(self, rows: Any, count: int, dim: int, field: str = "vectors") -> np.ndarray:
        rows = np.asarray(rows, dtype=np.float32)
        if rows.shape != (count, dim):
            raise EmbedkitError(f"{count} ids need {count} x {dim} vectors, not {rows.shape}", field=field)
        if not np.isfinite(rows).all():
            raise EmbedkitError("a vector holds NaN or infinity", field=field)
        return rows


class SparseFormat(RowFormat):
    kind, suffix = "sparse", ".npz"

    def write(self, path: Path, rows: SparseRows) -> None:
        save_npz(path, indptr=rows.indptr, indices=rows.indices, values=rows.values)

    def read(self, path: Path, dim: int, mmap: bool = False) -> SparseRows:
        arrays = read_npz(path, ("indptr", "indices", "values"), "sparse shard")
        return _checked(path, "sparse", lambda: SparseRows(*arrays, dim))

    def stack(self, parts: Sequence[SparseRows], dim: int, settings: dict[str, Any]) -> SparseRows:
        return SparseRows.vstack(parts, dim)

    def stats(self, rows: SparseRows) -> dict[str, Any]:
        return {"nnz": rows.nnz_stats()}  # non-zeros per document: what a sparse index stores and reads

    positive_only = True

    def row_json(self, rows: SparseRows, i: int) -> dict[str, list]:
        indices, values = rows.row(i)  # each text's non-zero dimensions and their weights
        return {"indices": indices.tolist(), "values": values.tolist()}

    def to_blobs(self, rows: SparseRows) -> list[bytes]:
        out = []
        for i in range(len(rows)):
            indices, values = rows.row(i)
            out.append(indices.astype("<i4").tobytes() + values.astype("<f4").tobytes())
        return out

    def from_blobs(self, blobs: Sequence[bytes], dim: int, settings: dict[str, Any]) -> SparseRows:
        counts = [len(blob) // 8 for blob in blobs]
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        indices = [np.frombuffer(blob[: 4 * n], "<i4") for blob, n in zip(blobs, counts)]
        values = [np.frombuffer(blob[4 * n :], "<f4") for blob, n in zip(blobs, counts)]
        if not blobs:
            return SparseRows.empty(dim)
        return SparseRows(indptr, np.concatenate(indices).astype(np.int32), np.concatenate(values).astype(np.float32),
                          dim)  # fmt: skip

    def score(self, queries: SparseRows, documents: SparseRows) -> np.ndarray:
        return (queries.to_scipy() @ documents.to_scipy().T).toarray().astype(np.float32)

    def check(self, rows: Any, count: int, dim: int, field: str = "vectors") -> SparseRows:
        rows = super().check(rows, count, dim, field)
        if not np.isfinite(rows.values).all():
            raise EmbedkitError("a sparse vector holds NaN or infinity", field=field)
        return rows


class TokenFormat(RowFormat):
    kind, suffix = "multivector", ".npz"

    def write(self, path: Path, rows: TokenRows) -> None:
        save_npz(path, offsets=rows.offsets, vectors=rows.vectors)

    def read(self, path: Path, dim: int, mmap: bool = False) -> TokenRows:
        arrays = read_npz(path, ("offsets", "vectors"), "multi-vector shard")
        return _checked(path, "multi-vector", lambda: TokenRows(*arrays))

    def stack(self, parts: Sequence[TokenRows], dim: int, settings: dict[str, Any]) -> TokenRows:
        return TokenRows.vstack(parts, dim, settings.get("token_dtype") or "float16")

    def stats(self, rows: TokenRows) -> dict[str, Any]:
        return {"tokens": rows.token_stats()}  # tokens and stored bytes per document: what a late index holds

    def row_json(self, rows: TokenRows, i: int) -> list[list[float]]:
        return rows.row(i).astype("float32").tolist()  # each text's token vectors

    def to_blobs(self, rows: TokenRows) -> list[bytes]:
        return [np.ascontiguousarray(rows.row(i)).tobytes() for i in range(len(rows))]

    def from_blobs(self, blobs: Sequence[bytes], dim: int, settings: dict[str, Any]) -> TokenRows:
        dtype = np.dtype(settings.get("token_dtype") or "float16")
        parts = [np.frombuffer(blob, dtype).reshape(-1, dim) for blob in blobs]
        offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)
        return TokenRows(offsets, np.concatenate(parts) if parts else np.zeros((0, dim), dtype))

    def score(self, queries: TokenRows, documents: TokenRows) -> np.ndarray:
        return maxsim(queries, documents)

    def check(self, rows: Any, count: int, dim: int, field: str = "vectors") -> TokenRows:
        rows = super().check(rows, count, dim, field)
        if not np.isfinite(rows.vectors).all():
            raise EmbedkitError("a token vector holds NaN or infinity", field=field)
        return rows


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


def read_npz(path: Path, names: tuple[str, ...], what: str) -> list[np.ndarray]:
    """The named arrays of an ``.npz`` file; a damaged or incomplete one is one line naming it."""
    try:
        with np.load(path, allow_pickle=False) as arrays:
            return [arrays[name] for name in names]
    except (ValueError, KeyError, EOFError, OSError, zipfile.BadZipFile) as err:
        raise EmbedkitError(f"not a readable {what} ({str(err).splitlines()[0]})", path=path) from None


def _checked(path: Path, what: str, make: Any) -> Any:
    try:
        return make()
    except ValueError as err:
        raise EmbedkitError(f"not a readable {what} shard ({err})", path=path) from None
