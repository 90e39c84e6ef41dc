"""Approximate late-interaction search, ColBERT's end-to-end route built from FAISS: an IVF over every document token
vector gives candidates (the documents owning the ``candidates`` nearest tokens of each query token, ``nprobe`` lists
visited), then exact MaxSim ranks the candidates from the stored token vectors.

It stands in for PLAID: ``fast-plaid``'s wheels pin another torch than embedkit's (see the README). A document no
query token reaches is not a hit, so recall against ``MultiVectorExactIndex`` is what ``nprobe`` and ``candidates``
trade for speed; the exact index is the reference it is tested against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import faiss
import numpy as np

from embedkit.data.trec import top_hits
from embedkit.errors import EmbedkitError
from embedkit.index.engine import ProbedSearch, open_meta, refuse_filter, write_meta
from embedkit.index.multivector_exact import FORMAT, MULTIVECTOR_INDEX_KIND, MultiVectorExactIndex, read_documents
from embedkit.multivector import TokenRows, maxsim
from embedkit.outputs import replace_folder
from embedkit.protocols import Capabilities, Hits
from embedkit.storage import save_npz, write_lines
from embedkit.validation import check_whole

TRAIN_PER_LIST = 64  # token vectors k-means sees per list: enough for stable centroids, far less than all of them


def default_lists(tokens: int) -> int:
    """A power of two near ``4 * sqrt(tokens)`` (PLAID's rule of thumb, at a quarter of its centroids)."""
    return max(1, 2 ** round(math.log2(max(1.0, 4 * math.sqrt(tokens)))))


@dataclass(eq=False)  # an index is itself: hashed by identity (its chunk map is cached by it)
class MultiVectorIVFIndex(ProbedSearch):
    exact: MultiVectorExactIndex  # the stored token vectors, ids and settings; MaxSim over the candidates
    ivf: Any  # faiss IndexIVF over every token vector, ids = token positions
    nprobe: int = 16
    candidates: int = 64
    engine: ClassVar[str] = "ivf"
    family: ClassVar[str] = "multivector"
    capabilities: ClassVar[Capabilities] = Capabilities(approximate=True)
    search_parameters: ClassVar[tuple[str, ...]] = ("nprobe", "candidates")

    @classmethod
    def build(cls, embeddings: Any, lists: int | None = None, seed: int = 0) -> MultiVectorIVFIndex:
        return cls.of(MultiVectorExactIndex.build(embeddings), lists, seed)

    @classmethod
    def from_rows(cls, rows: TokenRows, ids: list[str], settings: dict[str, Any], like: Any = None):
        """A new index of these rows; ``like`` (a compaction's old index) gives its search parameters."""
        lists = None if like is None else min(int(like.ivf.nlist), max(1, len(rows.vectors)))
        built = cls.of(MultiVectorExactIndex(rows, list(ids), settings), lists)
        if like is not None:
            built.set_search_params(like.nprobe, like.candidates)
        return built

    def stored_rows(self) -> TokenRows:
        return self.exact.documents

    @property
    def doc_ids(self) -> list[str]:
        return self.exact.doc_ids

    ids = doc_ids

    @classmethod
    def of(cls, exact: MultiVectorExactIndex, lists: int | None = None, seed: int = 0) -> MultiVectorIVFIndex:
        """An IVF over the token vectors of ``exact`` (k-means on a seeded sample, ``TRAIN_PER_LIST`` per list)."""
        vectors = exact.documents.vectors.astype(np.float32)
        lists = lists or default_lists(len(vectors))
        check_whole(lists, "lists", minimum=1, maximum=max(1, len(vectors)))
        ivf = faiss.index_factory(exact.documents.dim, f"IVF{lists},SQfp16", faiss.METRIC_INNER_PRODUCT)
        sample = np.random.default_rng(seed).permutation(len(vectors))[: TRAIN_PER_LIST * lists]
        ivf.cp.seed = seed
        ivf.train(vectors[np.sort(sample)])
        ivf.add(vectors)
        return cls(exact, ivf)

    def __len__(self) -> int:
        return len(self.exact)

    @property
    def settings(self) -> dict[str, Any]:
        return self.exact.settings

    @property
    def model_settings(self) -> dict[str, Any]:
        return self.exact.settings

    def save(self, folder: str | Path, overwrite: bool = False) -> Path:
        with replace_folder(folder, MULTIVECTOR_INDEX_KIND, overwrite) as staging:
            self.write_files(staging)
        return Path(folder)

    def write_files(self, staging: Path) -> None:
        documents = self.exact.documents
        faiss.write_index(self.ivf, str(staging / "ivf"))
        save_npz(staging / "tokens.npz", offsets=documents.offsets, vectors=documents.vectors)
        write_lines(staging / "docid", self.exact.doc_ids)
        write_meta(staging, {
            "format": FORMAT,
            "engine": "ivf",
            "documents": len(self),
            "dim": documents.dim,
            "tokens": len(documents.vectors),
            "token_dtype": str(documents.vectors.dtype),
            "lists": int(self.ivf.nlist),
            "search_params": self.search_params,
            "settings": self.settings,
        })  # fmt: skip

    @classmethod
    def open(cls, folder: str | Path) -> MultiVectorIVFIndex:
        folder = Path(folder)
        meta = open_meta(folder, FORMAT, "ivf", ("ivf", "tokens.npz", "docid"), "an IVF multi-vector index")
        exact = MultiVectorExactIndex(*read_documents(folder), meta["settings"])
        try:
            ivf = faiss.read_index(str(folder / "ivf"))
        except RuntimeError as err:
            raise EmbedkitError(
                f"not a readable FAISS index ({str(err).splitlines()[0]})", path=folder / "ivf"
            ) from None
        return cls(exact, ivf, **meta["search_params"])

    load = open

    def candidate_documents(self, query: np.ndarray) -> np.ndarray:
        """The documents owning the ``candidates`` nearest token vectors of any of the query's token vectors."""
        self.ivf.nprobe = self.nprobe
        _, tokens = self.ivf.search(np.ascontiguousarray(query, dtype=np.float32), self.candidates)
        tokens = tokens[tokens >= 0]
        return np.unique(np.searchsorted(self.exact.documents.offsets, tokens, side="right") - 1)

    def search(self, queries: TokenRows, k: int, *, filter: str | None = None, nprobe: int | None = None,
               candidates: int | None = None) -> Hits:  # fmt: skip
        """The top ``k`` candidates of each query by exact MaxSim, best first (``nprobe`` and ``candidates`` for
        this search only, else the index's own)."""
        check_whole(k, "k", minimum=1)
        refuse_filter(filter, "multi-vector")
        if nprobe is not None or candidates is not None:
            kept = self.search_params
            self.set_search_params(nprobe, candidates)
            try:
                return self.search(queries, k)
            finally:
                self.nprobe, self.candidates = kept["nprobe"], kept["candidates"]
        if len(queries) and queries.dim != self.exact.documents.dim:
            raise EmbedkitError(f"query token vectors have {queries.dim} dimensions, the index "
                                f"{self.exact.documents.dim}: another model's", field="model")  # fmt: skip
        results = []
        for i in range(len(queries)):
            found = self.candidate_documents(queries.row(i))
            one = queries.take([i])
            scores = maxsim(one, self.exact.documents.take(found))[0] if len(found) else np.zeros(0, np.float32)
            results.append(top_hits(scores, [self.exact.doc_ids[j] for j in found], k))
        return Hits.from_ranked(results, k)
