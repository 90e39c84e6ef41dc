"""Exact top-k through torch (``torch.mm`` + ``topk``): the GPU exact search for machines with a CUDA GPU but
faiss-cpu only (the pip wheels), where FAISS would search a ``Flat`` index on the CPU.

The database and the queries are cut into blocks whose scores fit ``max_memory``; each block's top-k is merged into
the running top-k, so the memory used does not grow with the corpus. torch is imported inside the functions: the
index layer is read by ``embedkit index`` without torch otherwise.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.errors import EmbedkitError

BACKENDS = ("auto", "faiss", "torch")  # auto: torch on a CUDA GPU when FAISS sees none, else FAISS
DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class ExactSearch:
    """How a ``Flat`` index is searched: by FAISS or by torch on ``device`` (None: ``cuda``), computing the inner
    products in ``dtype``, with score blocks bounded by ``max_memory`` bytes (``block_rows`` database rows per block
    when given)."""

    backend: str = "auto"
    device: str | None = None
    dtype: str = "float32"
    max_memory: int = 1 << 30
    block_rows: int | None = None

    def check(self) -> ExactSearch:
        if self.backend not in BACKENDS:
            raise EmbedkitError(f"unknown value '{self.backend}' (choose from {', '.join(BACKENDS)})", field="backend")
        if self.dtype not in DTYPES:
            raise EmbedkitError(f"unknown value '{self.dtype}' (choose from {', '.join(DTYPES)})", field="dtype")
        if self.max_memory < 1 << 20:
            raise EmbedkitError(f"must be at least 1 MiB, not {self.max_memory} bytes", field="max_memory")
        if self.block_rows is not None and self.block_rows < 1:
            raise EmbedkitError(f"must be at least 1, not {self.block_rows}", field="block_rows")
        return self

    @classmethod
    def from_meta(cls, record: dict[str, Any] | None) -> ExactSearch:
        """The settings meta.json keeps (``exact_search``), without what the last search recorded it used."""
        known = {name: value for name, value in (record or {}).items() if name in cls.__dataclass_fields__}
        return cls(**known).check()

    def to_meta(self) -> dict[str, Any]:
        return asdict(self)


def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU; torch is not imported on a machine without an NVIDIA driver."""
    if "torch" not in sys.modules and not Path("/proc/driver/nvidia").exists():
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def wants_torch(settings: ExactSearch, faiss_gpus: int) -> bool:
    """Whether a ``Flat`` index is searched by torch: asked for, or (auto) a CUDA GPU that FAISS cannot use."""
    if settings.backend != "auto":
        return settings.backend == "torch"
    return faiss_gpus == 0 and cuda_available()


class TorchExactSearch:
    """Exact top-k over ``database`` (float32 rows; a view of a FAISS ``Flat`` index's storage) with torch.

    The database is copied to the device once when it fits in half of ``max_memory`` (in the compute dtype), so
    repeated searches on a GPU do not move it again; otherwise each search streams it block by block.
    """

    def __init__(self, database: np.ndarray, metric: str, settings: ExactSearch) -> None:
        import torch

        self.settings = settings.check()
        self.metric = metric
        self.database = database
        self.device = torch.device(settings.device or "cuda")
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise EmbedkitError(f"torch sees no CUDA GPU for device '{self.device}'", field="device")
        self.dtype = getattr(torch, settings.dtype)
        itemsize = torch.empty(0, dtype=self.dtype).element_size()
        rows, dim = database.shape
        fit = max(1, settings.max_memory // 2 // max(1, dim * itemsize))
        self.block_rows = int(min(rows, settings.block_rows or fit)) or 1
        self._resident = None
        if rows * dim * itemsize <= settings.max_memory // 2:
            self._resident = [self._block(start) for start in range(0, rows, self.block_rows)]

    def _block(self, start: int) -> tuple[Any, Any]:
        """Database rows ``start:start+block_rows`` on the device in the compute dtype, and their squared norms."""
        import torch

        block = torch.from_numpy(np.ascontiguousarray(self.database[start : start + self.block_rows]))
        block = block.to(self.device)
        norms = (block * block).sum(1) if self.metric == "l2" else None
        return block.to(self.dtype), norms

    def record(self) -> dict[str, Any]:
        """What the search used, kept in meta.json beside the settings."""
        rows = len(self.database)
        return {
            "backend": "torch",
            "device": str(self.device),
            "dtype": self.settings.dtype,
            "block_rows": self.block_rows,
            "database_blocks": -(-rows // self.block_rows),
        }

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` scores (inner products, or squared L2 distances as FAISS reports them) and rows, best first."""
        import torch

        k = min(k, len(self.database))
        scores = np.empty((len(queries), k), dtype=np.float32)
        rows = np.empty((len(queries), k), dtype=np.int64)
        # a query block's float32 scores against one database block take the other half of the memory bound
        step = max(1, self.settings.max_memory // 2 // (4 * self.block_rows + 1))
        with torch.inference_mode():
            for start in range(0, len(queries), step):
                found, where = self._search_block(torch.from_numpy(queries[start : start + step]), k)
                scores[start : start + step], rows[start : start + step] = found, where
        return scores, rows

    def _search_block(self, queries: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        import torch

        queries = queries.to(self.device)
        largest = self.metric == "ip"
        query_norms = (queries * queries).sum(1, keepdim=True) if self.metric == "l2" else None
        queries = queries.to(self.dtype)
        best_scores = best_rows = None
        for number, start in enumerate(range(0, len(self.database), self.block_rows)):
            block, norms = self._resident[number] if self._resident is not None else self._block(start)
            scores = torch.mm(queries, block.T).float()
            if norms is not None:
                scores = query_norms - 2 * scores + norms
            top_scores, top_rows = torch.topk(scores, min(k, scores.shape[1]), dim=1, largest=largest)
            top_rows += start
            if best_scores is not None:
                top_scores = torch.cat([best_scores, top_scores], dim=1)
                top_rows = torch.cat([best_rows, top_rows], dim=1)
                top_scores, order = torch.topk(top_scores, min(k, top_scores.shape[1]), dim=1, largest=largest)
                top_rows = torch.gather(top_rows, 1, order)
            best_scores, best_rows = top_scores, top_rows
        return best_scores.cpu().numpy(), best_rows.cpu().numpy()


def flat_storage(index: Any) -> np.ndarray | None:
    """The float32 rows of a FAISS ``IndexFlat`` (a view, nothing copied), or None for any other index type."""
    import faiss

    inner = faiss.downcast_index(index)
    if not isinstance(inner, faiss.IndexFlat) or inner.metric_type not in (faiss.METRIC_INNER_PRODUCT, faiss.METRIC_L2):
        return None
    if inner.ntotal == 0:
        return np.empty((0, inner.d), dtype=np.float32)
    return faiss.rev_swig_ptr(inner.get_xb(), inner.ntotal * inner.d).reshape(inner.ntotal, inner.d)
