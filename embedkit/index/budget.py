"""Which FAISS indexes fit a memory budget: candidate factory strings and the memory each is predicted to take.

After autofaiss's ``get_optimal_index_keys_v2``: the uncompressed indexes while they fit (``Flat``, ``HNSW32``,
``IVF{c},Flat``), else ``IVF{c},SQ8`` (1 byte a dimension: the most accurate compression), else
``OPQ{m}_{4m},IVF{c},PQ{m}`` with the largest code the budget allows and the next smaller one. IVF
cells are ``4*sqrt(n)`` and ``16*sqrt(n)`` rounded to powers of two, at most one per 39 training vectors
(FAISS's k-means minimum). Pure functions of the sizes: no FAISS, no vectors.
``embedkit.index.choose`` builds the candidates that fit and keeps the fastest that meets the target.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

from embedkit.errors import EmbedkitError

SMALL = 10_000  # below this, exact search is fast and graphs or cells gain nothing
POINTS_PER_CELL = 39  # FAISS's k-means warns below 39 training points per centroid
HNSW_M = 32
PQ_CODES = (192, 128, 96, 64, 48, 32, 24, 16, 8)  # bytes per vector (8-bit codes), largest first; <= dim/4
ID_BYTES = 8  # an IVF list keeps a 64-bit id per vector
LIST_BYTES = 64  # per IVF list: two std::vectors and their bookkeeping
UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 1 << 10, "mib": 1 << 20}
UNITS |= {"gib": 1 << 30, "tib": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]+)\s*$", re.IGNORECASE)


def parse_size(text: str, flag: str = "--max-memory") -> int:
    """Bytes from '512MiB', '0.5GiB', '2GB' (KiB/MiB/GiB are powers of 1024, KB/MB/GB of 1000)."""
    found = _SIZE.match(str(text))
    unit = found.group(2).lower() if found else ""
    if not found or unit not in UNITS:
        raise EmbedkitError(f"'{text}' is not a size: write a number and a unit, e.g. 512MiB, 0.5GiB, 2GB", field=flag)
    size = int(float(found.group(1)) * UNITS[unit])
    if size < 1:
        raise EmbedkitError(f"'{text}' is no memory at all", field=flag)
    return size


@dataclass(frozen=True)
class Candidate:
    """A factory string and its predicted memory: ``fixed`` bytes (centroids, rotations, tables) plus ``per_vector``
    bytes for each of ``count`` vectors (the vector or its code, graph links or list ids)."""

    factory: str
    family: str  # flat | hnsw | ivf-flat | ivf-sq8 | ivf-pq
    per_vector: float
    fixed: int
    count: int
    budget: int
    tables: int = 0  # built at search time, not saved: IVF-PQ's precomputed L2 tables

    @property
    def predicted_bytes(self) -> int:
        return int(self.fixed + self.tables + self.per_vector * self.count)

    @property
    def fits(self) -> bool:
        return self.predicted_bytes <= self.budget

    @property
    def tunable(self) -> bool:
        return self.family != "flat"

    def to_meta(self) -> dict[str, Any]:
        record = asdict(self)
        del record["budget"]
        return {**record, "predicted_bytes": self.predicted_bytes, "fits": self.fits}


def ivf_cells(count: int, train_size: int) -> list[int]:
    """IVF cell counts worth trying: ``4*sqrt(n)`` and ``16*sqrt(n)`` rounded to powers of two, bounded by the
    training sample (``POINTS_PER_CELL`` vectors per cell) and by the vectors themselves."""
    cap = 2 ** math.floor(math.log2(max(1, min(count, train_size) // POINTS_PER_CELL)))
    wanted = (2 ** round(math.log2(4 * math.sqrt(count))), 2 ** round(math.log2(16 * math.sqrt(count))))
    return sorted({max(1, min(cells, cap)) for cells in wanted})


def _opq_dim(dim: int, code: int) -> int:
    """OPQ output dimension for ``code`` sub-quantizers: 4 dimensions each (FAISS's usual ``OPQ{m}_{4m}``), at most
    the input dimension, a multiple of ``code``."""
    return min(dim // code, 4) * code


def _ivf_fixed(cells: int, dim: int) -> int:
    return cells * (dim * 4 + LIST_BYTES)


def plan_candidates(
    count: int, dim: int, budget: int, metric: str = "ip", train_size: int = 1_000_000
) -> list[Candidate]:
    """Every index considered for ``count`` vectors of ``dim`` under ``budget`` bytes, in order of preference; the
    ones that fit (``fits``) are worth building. Each family is considered only when none of the more accurate
    ones before it fits, and only ``Flat`` for fewer than ``SMALL`` vectors when it fits."""

    def candidate(factory: str, family: str, per_vector: float, fixed: int, tables: int = 0) -> Candidate:
        return Candidate(factory, family, per_vector, fixed, count, budget, tables)

    cells = ivf_cells(count, train_size)
    flat = candidate("Flat", "flat", dim * 4, 0)
    if count < SMALL and flat.fits:
        return [flat]
    # HNSW: 2M level-0 links plus about one upper level of M (int32 each), a level and an offset per vector
    uncompressed = [
        flat,
        candidate(f"HNSW{HNSW_M}", "hnsw", dim * 4 + 4 * (2 * HNSW_M + HNSW_M / (HNSW_M - 1)) + 12, 0),
        *(candidate(f"IVF{c},Flat", "ivf-flat", dim * 4 + ID_BYTES, _ivf_fixed(c, dim)) for c in cells),
    ]
    if count < SMALL:
        uncompressed = [c for c in uncompressed if c.family != "hnsw"]
    if any(c.fits for c in uncompressed):
        return uncompressed
    sq8 = [candidate(f"IVF{c},SQ8", "ivf-sq8", dim + ID_BYTES, _ivf_fixed(c, dim) + 2 * dim * 4) for c in cells]
    if any(c.fits for c in sq8):
        return [*uncompressed, *sq8]
    pq = []
    for code in (code for code in PQ_CODES if code <= dim // 4):
        reduced = _opq_dim(dim, code)
        fixed = _ivf_fixed(cells[0], reduced) + dim * reduced * 4 + 256 * reduced * 4
        # IVF-PQ by residual precomputes a cells x m x 256 float table for L2 search
        tables = cells[0] * code * 256 * 4 if metric == "l2" else 0
        # 'np': no polysemous training (slow, and only of use with a Hamming threshold embedkit does not set)
        factory = f"OPQ{code}_{reduced},IVF{cells[0]},PQ{code}np"
        pq.append(candidate(factory, "ivf-pq", code + ID_BYTES, fixed, tables))
    fitting = [index for index, c in enumerate(pq) if c.fits]
    chosen_pq = pq[fitting[0] : fitting[0] + 2] if fitting else pq[-1:]  # the largest code that fits, the next
    return [*uncompressed, *sq8, *chosen_pq]
