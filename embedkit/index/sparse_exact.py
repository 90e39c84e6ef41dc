"""The exact sparse index: every document's sparse vector in one CSR matrix, searched by sparse products.

It is the reference the approximate and quantised sparse indexes (Lucene impact, Seismic) are tested against, and
the index to use for a corpus small enough to hold (a few hundred thousand documents). Scores are dot products of
the float32 weights; a document that shares no dimension with a query scores 0 and is not a hit (as in Lucene). Ties
are broken as trec_eval scores them (``TIE_BREAK``: score descending, then document id descending), including at the
k-th place, so the top k is the one scoring would see.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from embedkit.data.trec import TIE_BREAK, top_hits
from embedkit.encode.folder import load_sparse_rows
from embedkit.errors import EmbedkitError
from embedkit.index.engine import check_family, open_meta, refuse_filter, write_meta
from embedkit.index.registry import SPARSE_FORMAT as FORMAT
from embedkit.outputs import replace_folder
from embedkit.protocols import Capabilities, Hits
from embedkit.sparse import SparseRows
from embedkit.storage import read_lines, save_npz, write_lines
from embedkit.validation import check_whole

SPARSE_INDEX_KIND = "sparse-index"
QUERY_BLOCK = 256  # queries scored at once: a block's dense score matrix is QUERY_BLOCK x documents float32


@dataclass(eq=False)  # an index is itself: hashed by identity (its chunk map is cached by it)
class SparseExactIndex:
    documents: Any  # scipy.sparse.csr_matrix, documents x dim
    doc_ids: list[str]
    settings: dict[str, Any]  # the model's, from the embeddings folder
    engine: ClassVar[str] = "exact"
    family: ClassVar[str] = "sparse"
    search_parameters: ClassVar[tuple[str, ...]] = ()
    capabilities: ClassVar[Capabilities] = Capabilities()

    @property
    def model_settings(self) -> dict[str, Any]:
        return self.settings

    @property
    def ids(self) -> list[str]:
        """Each row's id (a chunk row's is ``<document>#<n>``)."""
        return self.doc_ids

    @classmethod
    def build(cls, embeddings: Any) -> SparseExactIndex:
        """From a sparse ``EmbeddingsFolder`` (every shard verified as it is read)."""
        check_family(embeddings, cls.family)
        return cls(embeddings.embeddings().to_scipy(), embeddings.ids(), embeddings.settings)

    @classmethod
    def from_rows(cls, rows: SparseRows, ids: list[str], settings: dict[str, Any], like: Any = None):
        return cls(rows.to_scipy(), list(ids), settings)

    def stored_rows(self) -> SparseRows:
        matrix = self.documents
        return SparseRows(matrix.indptr.astype(np.int64), matrix.indices.astype(np.int32),
                          matrix.data.astype(np.float32), int(matrix.shape[1]))  # fmt: skip

    def __len__(self) -> int:
        return len(self.doc_ids)

    def save(self, folder: str | Path, overwrite: bool = False) -> Path:
        with replace_folder(folder, SPARSE_INDEX_KIND, overwrite) as staging:
            self.write_files(staging)
        return Path(folder)

    def write_files(self, staging: Path) -> None:
        matrix = self.documents
        save_npz(staging / "vectors.npz", indptr=matrix.indptr, indices=matrix.indices, values=matrix.data)
        write_lines(staging / "docid", self.doc_ids)
        write_meta(staging, {
            "format": FORMAT,
            "engine": "exact",
            "documents": len(self),
            "dim": int(matrix.shape[1]),
            "nnz": int(matrix.nnz),
            "tie_break": TIE_BREAK,
            "settings": self.settings,
        })  # fmt: skip

    @classmethod
    def open(cls, folder: str | Path) -> SparseExactIndex:
        folder = Path(folder)
        meta = open_meta(folder, FORMAT, "exact", ("vectors.npz", "docid"), "an exact sparse index")
        rows = load_sparse_rows(folder / "vectors.npz", meta["dim"])
        doc_ids = read_lines(folder / "docid")
        if len(rows) != len(doc_ids):
            raise EmbedkitError(f"'vectors.npz' holds {len(rows)} rows, 'docid' {len(doc_ids)} ids", path=folder)
        return cls(rows.to_scipy(), doc_ids, meta["settings"])

    load = open

    def search(self, queries: SparseRows, k: int, *, filter: str | None = None) -> Hits:
        """The top ``k`` documents of each query row, best first."""
        check_whole(k, "k", minimum=1)
        refuse_filter(filter, "exact sparse")
        if queries.dim != self.documents.shape[1]:
            raise EmbedkitError(
                f"queries have {queries.dim} dimensions, the index {self.documents.shape[1]}: another model's",
                field="model",
            )
        transposed, results = self.documents.T.tocsc(), []
        for start in range(0, len(queries), QUERY_BLOCK):
            block = queries.take(range(start, min(start + QUERY_BLOCK, len(queries)))).to_scipy()
            scores = (block @ transposed).toarray().astype(np.float32)
            results += [top_hits(row, self.doc_ids, k, positive_only=True) for row in scores]
        return Hits.from_ranked(results, k)

