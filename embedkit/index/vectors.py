"""``Vectors``: the float vectors of a corpus as one row space, in memory or over memory-mapped shard files.

Builders train on a seeded sample of it and add it batch by batch, rescoring gathers the rows of a few candidates,
tuning streams it block by block; none of them needs the whole corpus in memory.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.encode.folder import EmbeddingsFolder
from embedkit.errors import EmbedkitError
from embedkit.storage import sha256_json

logger = logging.getLogger(__name__)


class Vectors:
    """Rows ``0..n-1`` over ``parts`` (arrays or memory-mapped shard files), with ids and the model settings when
    they come from an embeddings folder; row ``i`` is document ``i``."""

    def __init__(
        self,
        parts: list[np.ndarray],
        ids: list[list[str]] | None = None,
        settings: dict[str, Any] | None = None,
        path: Path | None = None,
        digest: str | None = None,
    ) -> None:
        if not parts:
            raise EmbedkitError("no vectors", path=path)
        dims = {int(part.shape[1]) for part in parts if part.ndim == 2}
        if len(dims) != 1 or any(part.ndim != 2 for part in parts):
            raise EmbedkitError("the vectors must be 2-d blocks of one dimension", path=path)
        if ids is not None and [len(block) for block in ids] != [len(part) for part in parts]:
            raise EmbedkitError(f"{sum(map(len, parts))} vectors but {sum(map(len, ids))} document ids", path=path)
        self.parts = parts
        self.part_ids = ids
        self.settings = settings
        self.path = path
        self.digest = digest  # of a whole embeddings folder: its shard files' sha256 (verified as they are read)
        self.dim = dims.pop()
        self.offsets = np.cumsum([0] + [len(part) for part in parts])

    @classmethod
    def of(cls, array: np.ndarray, ids: list[str] | None = None, settings: dict[str, Any] | None = None) -> Vectors:
        """One in-memory array (float32, C-contiguous), with its ids if given."""
        array = finite_matrix(array, "embeddings")
        return cls([array], None if ids is None else [list(ids)], settings)

    @classmethod
    def open(cls, source: Any) -> Vectors:
        """From a ``Vectors``, an array, an ``EmbeddingsFolder`` or an embeddings folder path (memory-mapped, every
        shard file verified; a partial folder is refused: its index would miss documents)."""
        if isinstance(source, Vectors):
            return source
        if isinstance(source, np.ndarray):
            return cls.of(source)
        if isinstance(source, (str, Path)):
            source = EmbeddingsFolder.open(source)
        if isinstance(source, EmbeddingsFolder):
            if not source.complete:
                raise EmbedkitError("the embeddings are incomplete; rerun 'embedkit encode'", path=source.path)
            shards = list(source.iter_shards())
            if not shards:
                raise EmbedkitError("the embeddings folder has no shard files", path=source.path)
            digest = sha256_json([[entry["sha256"], entry.get("ids_sha256")] for entry in source.manifest["shards"]])
            return cls([v for _, v in shards], [i for i, _ in shards], source.settings, Path(source.path), digest)
        raise EmbedkitError(f"cannot read vectors from a {type(source).__name__}")

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def ids(self, start: int = 0, stop: int | None = None) -> list[str]:
        if self.part_ids is None:
            raise EmbedkitError("these vectors carry no document ids")
        stop = len(self) if stop is None else stop
        return [doc for part, lo, hi in self.pieces(start, stop) for doc in self.part_ids[part][lo:hi]]

    def pieces(self, start: int, stop: int) -> Iterator[tuple[int, int, int]]:
        """``(part, first, last)`` row ranges local to each part that ``start:stop`` crosses."""
        for part in range(len(self.parts)):
            lo, hi = max(start, int(self.offsets[part])), min(stop, int(self.offsets[part + 1]))
            if lo < hi:
                yield part, lo - int(self.offsets[part]), hi - int(self.offsets[part])

    def batches(self, start: int, stop: int, batch_size: int) -> Iterator[tuple[int, np.ndarray]]:
        """``(first global row, float32 batch)`` over rows ``start:stop``, each batch read from one part only."""
        for part, lo, hi in self.pieces(start, stop):
            for first in range(lo, hi, batch_size):
                last = min(hi, first + batch_size)
                batch = np.ascontiguousarray(self.parts[part][first:last], dtype=np.float32)
                yield int(self.offsets[part]) + first, batch

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """Float32 vectors of ``rows`` (non-negative row numbers), reading only those rows of each part."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        if len(self.parts) == 1:
            out[:] = self.parts[0][rows]
            return out
        part_of = np.searchsorted(self.offsets, rows, side="right") - 1
        for part in np.unique(part_of):
            mask = part_of == part
            out[mask] = self.parts[part][rows[mask] - self.offsets[part]]
        return out

    def sample(self, count: int, seed: int = 0) -> np.ndarray:
        """A seeded sample of ``count`` rows (all rows if fewer), in row order: what an index trains on."""
        if count >= len(self):
            return self.gather(np.arange(len(self)))
        rows = np.sort(np.random.default_rng(seed).choice(len(self), count, replace=False))
        return self.gather(rows)

    def slice(self, start: int, stop: int) -> Vectors:
        """Rows ``start:stop`` as their own ``Vectors`` (views, nothing copied)."""
        parts = [self.parts[part][lo:hi] for part, lo, hi in self.pieces(start, stop)]
        ids = None if self.part_ids is None else [self.part_ids[p][lo:hi] for p, lo, hi in self.pieces(start, stop)]
        return Vectors(parts, ids, self.settings)

    def record(self, start: int = 0, stop: int | None = None, rows_sha256: str | None = None) -> dict[str, Any]:
        """What meta.json records of the rows an index holds: ``rows`` for part of a folder; for all of it the folder
        itself (``vectors``), where rescoring reads the floats. Both carry the checksums ``check_same`` compares:
        ``sha256`` (of a whole folder's shard files) and ``rows_sha256`` (of the float32 rows themselves)."""
        stop = len(self) if stop is None else stop
        sums = {"rows_sha256": rows_sha256} if rows_sha256 else {}
        if (start, stop) != (0, len(self)):
            return {"rows": [start, stop], **({"vectors": sums} if sums else {})}
        if self.path is None:
            return {"vectors": {"count": len(self), **sums}} if sums else {}
        folder = {"path": str(self.path.resolve()), "count": len(self), "sha256": self.digest}
        return {"vectors": {**folder, **sums}}

    def rows_sha256(self) -> str:
        """sha256 of all rows as float32 bytes (row-major), read batch by batch."""
        digest = hashlib.sha256()
        for _, batch in self.batches(0, len(self), 65536):
            digest.update(batch.tobytes())
        return digest.hexdigest()

    def check_same(self, recorded: dict[str, Any], where: Any = None) -> None:
        """Refuse vectors other than those an index was built from (``recorded``: meta.json's ``vectors``).

        A whole embeddings folder is compared by its shard files' checksums, anything else by its rows' sha256. An
        index written before the checksums were recorded is trusted with a one-line warning.
        """
        if self.digest and recorded.get("sha256"):
            if self.digest != recorded["sha256"]:
                raise EmbedkitError(
                    "the embeddings changed since the index was built (their shard checksums differ from the index's "
                    "meta.json, e.g. re-encoded with other settings); give the folder it was built from or rebuild "
                    f"the index{'' if where is None else f' at {where}'}",
                    path=self.path,
                )
            return
        if recorded.get("rows_sha256"):
            if self.rows_sha256() != recorded["rows_sha256"]:
                raise EmbedkitError(
                    "these float vectors differ from those the index was built from (their sha256 differs from the "
                    "index's meta.json); give the vectors it was built from or rebuild the index",
                    path=self.path,
                )
            return
        logger.warning(
            "embedkit: warning: the index%s records no checksum of the vectors it was built from (built by an older "
            "embedkit or from an array); rescoring trusts %s as it is now",
            "" if where is None else f" at {where}",
            self.path or "the vectors given",
        )


def finite_matrix(vectors: Any, name: str) -> np.ndarray:
    """A 2-d float32 C-contiguous copy (or view) of ``vectors``; NaN and infinity are refused, naming the first row."""
    if isinstance(vectors, (str, bytes)) or vectors is None:
        raise EmbedkitError(f"must be a 2-d array of numbers, not {type(vectors).__name__}", field=name)
    try:
        array = np.asarray(vectors)
        if array.dtype.kind not in "biuf":
            raise TypeError(array.dtype)
        with np.errstate(over="ignore"):  # a float64 beyond float32's range becomes inf: refused below
            array = np.ascontiguousarray(array, dtype=np.float32)
    except (TypeError, ValueError, OverflowError):
        raise EmbedkitError(f"must be a 2-d array of numbers, not {type(vectors).__name__}", field=name) from None
    if array.ndim != 2:
        raise EmbedkitError(f"must be a 2-d array, got shape {array.shape}", field=name)
    bad = ~np.isfinite(array).all(axis=1)
    if bad.any():
        row = int(np.argmax(bad))
        raise EmbedkitError(f"row {row} holds NaN or infinity ({int(bad.sum())} such rows)", field=name)
    return array
