"""Compressed late-interaction search in PLAID's three stages (ColBERTv2's engine), on FAISS k-means centroids.

Each document token is stored as its centroid id and a few bits per dimension (``ResidualCodec``). A query:

1. **candidates**: each query token probes its ``nprobe`` best centroids; the documents holding a token of any of
   them are candidates, each scored by summing, per query token, its best probed centroid score (a query token that
   reached no token of the document counts its ``nprobe``-th centroid score, XTR's imputation);
2. **centroid interaction**: the best ``candidates`` of those are scored by MaxSim over their tokens' centroids alone
   (codes, nothing decompressed);
3. **exact MaxSim** on the decompressed tokens of the best quarter of those (at least ``k``).

Nothing is a hit that no probed centroid reaches, so recall against ``MultiVectorExactIndex`` (the reference, tested
against it) is what ``nprobe``, ``candidates`` and ``bits`` trade for speed and bytes. The index keeps no exact token
vectors: a living index of it takes its rows from the embeddings folder, and new tokens are encoded against the
existing centroids.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from embedkit.data.trec import top_hits
from embedkit.errors import EmbedkitError
from embedkit.index.engine import ProbedSearch, check_family, open_meta, refuse_filter, write_meta
from embedkit.index.multivector_exact import FORMAT, MULTIVECTOR_INDEX_KIND
from embedkit.index.residual_codec import ResidualCodec
from embedkit.multivector import TokenRows, maxsim
from embedkit.outputs import replace_folder
from embedkit.protocols import Capabilities, Hits
from embedkit.rows import read_npz
from embedkit.storage import read_lines, save_npz, write_lines
from embedkit.validation import check_whole

ENGINE = "plaid"
DEFAULT_BITS = 2


def default_centroids(tokens: int) -> int:
    """A power of two near ``4 * sqrt(tokens)`` (PLAID takes 16x; fewer centroids keep k-means cheap on a CPU)."""
    return max(1, min(tokens, 2 ** round(math.log2(max(1.0, 4 * math.sqrt(tokens))))))


@dataclass(eq=False)  # an index is itself: hashed by identity (its chunk map is cached by it)
class MultiVectorPlaidIndex(ProbedSearch):
    codec: ResidualCodec
    codes: np.ndarray  # each token's centroid id, documents' tokens in order
    residuals: np.ndarray  # uint8 [tokens, dim * bits / 8]
    offsets: np.ndarray  # int64 [documents + 1]: document i's tokens are offsets[i]:offsets[i + 1]
    doc_ids: list[str]
    settings: dict[str, Any]
    nprobe: int = 4
    candidates: int = 256
    lists: tuple[np.ndarray, np.ndarray] = field(init=False, repr=False)  # centroid -> documents holding it
    cells: tuple[np.ndarray, np.ndarray] = field(init=False, repr=False)  # document -> its distinct centroids
    engine: ClassVar[str] = ENGINE
    family: ClassVar[str] = "multivector"
    capabilities: ClassVar[Capabilities] = Capabilities(approximate=True)
    search_parameters: ClassVar[tuple[str, ...]] = ("nprobe", "candidates")

    def __post_init__(self) -> None:
        count, centroids = max(1, len(self.doc_ids)), len(self.codec.centroids)
        documents = np.repeat(np.arange(len(self.doc_ids), dtype=np.int64), np.diff(self.offsets))
        pairs = np.unique(documents * centroids + self.codes)  # each (document, centroid) once, by document
        by_document = np.searchsorted(pairs // centroids, np.arange(count + 1))
        self.cells = (by_document, (pairs % centroids).astype(self.codes.dtype))
        flipped = np.sort((pairs % centroids) * count + pairs // centroids)  # the same pairs, by centroid
        by_centroid = np.searchsorted(flipped // count, np.arange(centroids + 1))
        self.lists = (by_centroid, (flipped % count).astype(np.int32))

    @classmethod
    def build(cls, embeddings: Any, centroids: int | None = None, bits: int = DEFAULT_BITS, seed: int = 0):
        """From a multi-vector ``EmbeddingsFolder``: k-means on a seeded sample of its tokens, then each token coded."""
        check_family(embeddings, cls.family)
        return cls.from_rows(embeddings.embeddings(), embeddings.ids(), embeddings.settings, None, centroids, bits,
                             seed)  # fmt: skip

    @classmethod
    def from_rows(cls, rows: TokenRows, ids: list[str], settings: dict[str, Any], like: Any = None,
                  centroids: int | None = None, bits: int = DEFAULT_BITS, seed: int = 0) -> Any:  # fmt: skip
        """A new index of these rows; ``like`` (a compaction's old index) gives its codec and search parameters."""
        if like is not None:
            codec = like.codec
        else:
            count = centroids or default_centroids(len(rows.vectors))
            check_whole(count, "centroids", minimum=1, maximum=max(1, len(rows.vectors)))
            codec = ResidualCodec.train(rows.vectors, count, bits, seed)
        codes, residuals = codec.encode(rows.vectors)
        built = cls(codec, codes, residuals, rows.offsets.astype(np.int64), list(ids), settings)
        if like is not None:
            built.set_search_params(like.nprobe, like.candidates)
        return built

    def stored_rows(self) -> None:
        return None  # only codes: a living index reads the exact rows from the embeddings folder

    @property
    def ids(self) -> list[str]:
        return self.doc_ids

    @property
    def model_settings(self) -> dict[str, Any]:
        return self.settings

    def __len__(self) -> int:
        return len(self.doc_ids)

    @property
    def bytes_per_token(self) -> float:
        return self.codes.itemsize + self.residuals.shape[1]

    # --- files -----------------------------------------------------------------------------------------------------

    def save(self, folder: str | Path, overwrite: bool = False) -> Path:
        with replace_folder(folder, MULTIVECTOR_INDEX_KIND, overwrite) as staging:
            self.write_files(staging)
        return Path(folder)

    def write_files(self, staging: Path) -> None:
        save_npz(staging / "plaid.npz", codes=self.codes, residuals=self.residuals, offsets=self.offsets,
                 **self.codec.arrays())  # fmt: skip
        write_lines(staging / "docid", self.doc_ids)
        write_meta(staging, {
            "format": FORMAT,
            "engine": ENGINE,
            "documents": len(self),
            "dim": self.codec.dim,
            "tokens": len(self.codes),
            "centroids": len(self.codec.centroids),
            "bits": self.codec.bits,
            "normalised": self.codec.normalised,
            "bytes_per_token": self.bytes_per_token,
            "search_params": self.search_params,
            "settings": self.settings,
        })  # fmt: skip

    @classmethod
    def open(cls, folder: str | Path) -> MultiVectorPlaidIndex:
        folder = Path(folder)
        meta = open_meta(folder, FORMAT, ENGINE, ("plaid.npz", "docid"), "a PLAID multi-vector index")
        names = ("codes", "residuals", "offsets", "centroids", "cutoffs", "weights")
        arrays = dict(zip(names, read_npz(folder / "plaid.npz", names, "PLAID index file")))
        doc_ids = read_lines(folder / "docid")
        if len(arrays["offsets"]) != len(doc_ids) + 1 or arrays["offsets"][-1] != len(arrays["codes"]):
            raise EmbedkitError("'plaid.npz' and 'docid' disagree on the documents", path=folder)
        codec = ResidualCodec.from_arrays(arrays, meta["bits"], meta["normalised"])
        return cls(codec, arrays["codes"], arrays["residuals"], arrays["offsets"], doc_ids, meta["settings"],
                   **meta["search_params"])  # fmt: skip

    load = open

    # --- search ----------------------------------------------------------------------------------------------------

    def search(self, queries: TokenRows, k: int, *, filter: str | None = None, nprobe: int | None = None,
               candidates: int | None = None) -> Hits:  # fmt: skip
        """The top ``k`` documents of each query, best first (``nprobe`` and ``candidates`` for this search only)."""
        check_whole(k, "k", minimum=1)
        check_whole(nprobe, "nprobe", minimum=1)
        check_whole(candidates, "candidates", minimum=1)
        refuse_filter(filter, "multi-vector")
        if len(queries) and queries.dim != self.codec.dim:
            raise EmbedkitError(f"query token vectors have {queries.dim} dimensions, the index {self.codec.dim}: "
                                "another model's", field="model")  # fmt: skip
        probe, keep = nprobe or self.nprobe, max(candidates or self.candidates, k)
        results = [self._one(np.asarray(queries.row(i), np.float32), k, probe, keep) for i in range(len(queries))]
        return Hits.from_ranked(results, k)

    def _one(self, query: np.ndarray, k: int, probe: int, keep: int) -> list[tuple[str, float]]:
        if not len(query) or not len(self.doc_ids):
            return []
        scores = query @ self.codec.centroids.T  # [query tokens, centroids]
        found = self._candidates(scores, min(probe, scores.shape[1]), keep)
        found = self._centroid_interaction(scores, found, max(k, keep // 4))
        flat, lengths = _spans(self.offsets, found)
        decoded = self.codec.decode(self.codes[flat], self.residuals[flat])
        rows = TokenRows(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), decoded)
        exact = maxsim(TokenRows(np.array([0, len(query)], np.int64), query), rows)[0]
        return top_hits(exact, [self.doc_ids[d] for d in found], k)

    def _candidates(self, scores: np.ndarray, probe: int, keep: int) -> np.ndarray:
        """Stage 1: the ``keep`` best documents reached by the probed centroids, by imputed centroid scores.

        Per query token its probed lists are written in rising score order into a dense array over the documents, so
        each document holds its best probed score (no sort over the entries); the sums gather what each reached."""
        cells = np.argpartition(-scores, probe - 1, axis=1)[:, :probe]  # [query tokens, probe]
        cell_scores = np.take_along_axis(scores, cells, axis=1)
        rising = np.argsort(cell_scores, axis=1)
        cells, cell_scores = np.take_along_axis(cells, rising, axis=1), np.take_along_axis(cell_scores, rising, axis=1)
        starts, documents = self.lists
        total, best = np.zeros(len(self.doc_ids), np.float32), np.zeros(len(self.doc_ids), np.float32)
        reached = np.zeros(len(self.doc_ids), bool)
        for token_cells, token_scores in zip(cells, cell_scores):
            lists = [documents[starts[cell] : starts[cell + 1]] for cell in token_cells]
            for held, score in zip(lists, token_scores - token_scores[0]):  # over the token's floor (XTR's imputation)
                best[held] = score
            touched = np.concatenate(lists)
            total[touched] += best[touched]  # a repeated index adds once: each document counts its best centroid
            reached[touched] = True
        found = np.flatnonzero(reached)
        if len(found) <= keep:
            return found
        return found[np.argpartition(-total[found], keep - 1)[:keep]]

    def _centroid_interaction(self, scores: np.ndarray, found: np.ndarray, keep: int) -> np.ndarray:
        """Stage 2: the ``keep`` best of ``found`` by MaxSim over their distinct centroids (nothing decompressed)."""
        if len(found) <= keep:
            return found
        starts, codes = self.cells
        flat, lengths = _spans(starts, found)
        per_cell = np.ascontiguousarray(scores.T)[codes[flat]]  # [candidate cells, query tokens]: row gathers
        firsts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        approx = np.maximum.reduceat(per_cell, firsts, axis=0).sum(axis=1)  # every document holds >= 1 centroid
        return found[np.argpartition(-approx, keep - 1)[:keep]]


def _spans(starts: np.ndarray, picked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The positions ``starts[i]:starts[i + 1]`` of each picked ``i``, concatenated, and each span's length."""
    lengths = starts[picked + 1] - starts[picked]
    return np.repeat(starts[picked] - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum()), lengths
