"""The exact multi-vector index: every document's token vectors, searched by exhaustive MaxSim.

It is the reference every approximate late-interaction search (PLAID, candidates by centroid) is tested against, and
the index to use for a corpus small enough to score whole. Scores are ``embedkit.multivector.maxsim`` in float32 over
the stored token vectors (float16 or float32, as encoded); ties are broken as trec_eval scores them (score
descending, then document id descending), including at the k-th place.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from embedkit.data.trec import TIE_BREAK, top_hits
from embedkit.encode.folder import load_token_rows
from embedkit.errors import EmbedkitError
from embedkit.index.engine import check_family, open_meta, refuse_filter, write_meta
from embedkit.index.registry import MULTIVECTOR_FORMAT as FORMAT
from embedkit.multivector import TokenRows, maxsim
from embedkit.outputs import replace_folder
from embedkit.protocols import Capabilities, Hits
from embedkit.storage import read_lines, save_npz, write_lines
from embedkit.validation import check_whole

MULTIVECTOR_INDEX_KIND = "multivector-index"
QUERY_BLOCK = 64  # queries scored at once: a block's score matrix is QUERY_BLOCK x documents float32


@dataclass(eq=False)  # an index is itself: hashed by identity (its chunk map is cached by it)
class MultiVectorExactIndex:
    documents: TokenRows
    doc_ids: list[str]
    settings: dict[str, Any]  # the model's, from the embeddings folder
    engine: ClassVar[str] = "exact"
    family: ClassVar[str] = "multivector"
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
    def build(cls, embeddings: Any) -> MultiVectorExactIndex:
        """From a multi-vector ``EmbeddingsFolder`` (every shard verified as it is read)."""
        check_family(embeddings, cls.family)
        return cls(embeddings.embeddings(), embeddings.ids(), embeddings.settings)

    def __len__(self) -> int:
        return len(self.doc_ids)

    @classmethod
    def from_rows(cls, rows: TokenRows, ids: list[str], settings: dict[str, Any], like: Any = None):
        return cls(rows, list(ids), settings)

    def stored_rows(self) -> TokenRows:
        return self.documents

    def save(self, folder: str | Path, overwrite: bool = False) -> Path:
        with replace_folder(folder, MULTIVECTOR_INDEX_KIND, overwrite) as staging:
            self.write_files(staging)
        return Path(folder)

    def write_files(self, staging: Path) -> None:
        save_npz(staging / "tokens.npz", offsets=self.documents.offsets, vectors=self.documents.vectors)
        write_lines(staging / "docid", self.doc_ids)
        write_meta(staging, {
            "format": FORMAT,
            "engine": "exact",
            "documents": len(self),
            "dim": self.documents.dim,
            "tokens": len(self.documents.vectors),
            "token_dtype": str(self.documents.vectors.dtype),
            "tie_break": TIE_BREAK,
            "settings": self.settings,
        })  # fmt: skip

    @classmethod
    def open(cls, folder: str | Path) -> MultiVectorExactIndex:
        folder = Path(folder)
        meta = open_meta(folder, FORMAT, "exact", ("tokens.npz", "docid"), "an exact multi-vector index")
        return cls(*read_documents(folder), meta["settings"])

    load = open

    def search(self, queries: TokenRows, k: int, *, filter: str | None = None) -> Hits:
        """The top ``k`` documents of each query, best first."""
        check_whole(k, "k", minimum=1)
        refuse_filter(filter, "multi-vector")
        if len(queries) and queries.dim != self.documents.dim:
            raise EmbedkitError(
                f"query token vectors have {queries.dim} dimensions, the index {self.documents.dim}: another model's",
                field="model",
            )
        results = []
        for start in range(0, len(queries), QUERY_BLOCK):
            block = queries.take(range(start, min(start + QUERY_BLOCK, len(queries))))
            results += [top_hits(row, self.doc_ids, k) for row in maxsim(block, self.documents)]
        return Hits.from_ranked(results, k)


def read_documents(folder: Path) -> tuple[TokenRows, list[str]]:
    """A multi-vector index folder's token vectors and ids (a damaged file is one line)."""
    rows, doc_ids = load_token_rows(folder / "tokens.npz"), read_lines(folder / "docid")
    if len(rows) != len(doc_ids):
        raise EmbedkitError(f"'tokens.npz' holds {len(rows)} documents, 'docid' {len(doc_ids)} ids", path=folder)
    return rows, doc_ids
