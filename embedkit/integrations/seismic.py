"""Seismic (``pyseismic-lsr``, Bruch et al., SIGIR 2024): an approximate index of learned sparse vectors that reads
a few blocks of each query term's posting list, chosen by their summaries, instead of the whole list.

- Terms are dimension numbers written as strings (a CSR latent has no word; two words never collide).
- Seismic stores weights at reduced precision and may return a query's hits out of order; hits are re-ranked in
  ``TIE_BREAK`` order from its scores. A query matching nothing comes back empty and without its id.
- Its Rust core prints its build configuration to standard output while building and saving.
- Build settings are Seismic's defaults (``BUILD``); ``query_cut`` and ``heap_factor`` trade recall for speed at
  search time (sentence-transformers' defaults, ``SEARCH``).
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from embedkit.data.trec import ranked
from embedkit.errors import EmbedkitError
from embedkit.index.engine import LibraryFolder, open_meta, refuse_filter, write_meta
from embedkit.index.registry import SPARSE_FORMAT
from embedkit.outputs import check_output_folder, commit_folder, output_lock, recover
from embedkit.protocols import Capabilities, Hits
from embedkit.sparse import SparseRows
from embedkit.storage import NEW_MARK, write_lines
from embedkit.validation import check_whole

KIND = "sparse-index"
FORMAT = SPARSE_FORMAT
ENGINE = "seismic"
INDEX_FILE = "seismic"  # Seismic appends ".index.seismic"
BUILD = {"n_postings": 3500, "centroid_fraction": 0.1, "min_cluster_size": 2, "summary_energy": 0.4, "doc_cut": 15}
SEARCH = {"query_cut": 10, "heap_factor": 0.7}


def _seismic() -> Any:
    try:
        import seismic
    except ImportError:
        raise EmbedkitError("needs Seismic: pip install 'embedkit[seismic]'", field="--sparse-index") from None
    return seismic


def _terms(seismic: Any, indices: np.ndarray) -> np.ndarray:
    return indices.astype(str).astype(seismic.get_seismic_string())


def build_seismic_index(
    folder: str | Path, doc_ids: Sequence[str], rows: SparseRows, settings: dict[str, Any], *, overwrite: bool = False
) -> Path:
    """Build the index in a folder beside ``folder`` and swap it in whole."""
    seismic = _seismic()
    folder = Path(folder).absolute()
    with output_lock(folder):
        recover(folder)
        check_output_folder(folder, KIND, overwrite)
        work = folder.parent / f".{folder.name}{NEW_MARK}{secrets.token_hex(4)}"
        work.mkdir()
        try:
            dataset, empty = seismic.SeismicDataset(), []
            for i, doc_id in enumerate(doc_ids):
                indices, values = rows.row(i)
                if not len(indices):
                    empty.append(doc_id)
                    continue
                dataset.add_document(doc_id, _terms(seismic, indices), values.astype(np.float32))
            index = seismic.SeismicIndex.build_from_dataset(dataset, **BUILD, num_threads=1)
            index.save(str(work / INDEX_FILE))
            write_lines(work / "docid", doc_ids)  # pyserini's layout: the ids, for a living index and chunk rows
            write_meta(work, {
                "format": FORMAT,
                "engine": ENGINE,
                "documents": len(doc_ids),
                "indexed": len(doc_ids) - len(empty),
                "empty_documents": empty,
                "build": BUILD,
                "nnz": rows.nnz,
                "settings": settings,
                "versions": {"pyseismic-lsr": version("pyseismic-lsr")},
            })  # fmt: skip
            commit_folder(work, folder)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return folder


class SeismicSparse(LibraryFolder):
    """Searches a Seismic index with sparse query vectors."""

    engine: ClassVar[str] = ENGINE
    family: ClassVar[str] = "sparse"
    search_parameters: ClassVar[tuple[str, ...]] = ()
    capabilities: ClassVar[Capabilities] = Capabilities(approximate=True)

    def __init__(self, folder: str | Path, query_cut: int | None = None, heap_factor: float | None = None) -> None:
        self.folder = Path(folder)
        path = self.folder / f"{INDEX_FILE}.index.seismic"
        self.meta = open_meta(self.folder, FORMAT, ENGINE, (path.name,), "an embedkit Seismic index")
        self.search_params = {"query_cut": query_cut or SEARCH["query_cut"],
                              "heap_factor": heap_factor or SEARCH["heap_factor"]}  # fmt: skip
        self.index = _seismic().SeismicIndex.load(str(path))

    @classmethod
    def from_rows(cls, rows: SparseRows, ids: list[str], settings: dict[str, Any], like: Any = None):
        """A new index of these rows (a compaction's); ``like`` gives the search parameters."""
        params = like.search_params if like is not None else {}
        build = lambda folder: build_seismic_index(folder, ids, rows, settings)  # noqa: E731
        return cls.in_scratch(build, params.get("query_cut"), params.get("heap_factor"))

    def search(self, rows: SparseRows, k: int, *, filter: str | None = None) -> Hits:
        """Each query's top ``k``."""
        check_whole(k, "k", minimum=1)
        refuse_filter(filter, "Seismic")
        seismic = _seismic()
        count = len(rows)
        components = [_terms(seismic, rows.row(i)[0]) for i in range(count)]
        values = [rows.row(i)[1].astype(np.float32) for i in range(count)]
        found = self.index.batch_search(
            queries_ids=_terms(seismic, np.arange(count)), query_components=components,
            query_values=values, k=int(k), **self.search_params, num_threads=1,
        )  # fmt: skip
        run: dict[int, dict[str, float]] = {i: {} for i in range(count)}
        for hits in found:  # a query matching nothing comes back empty, without its position
            if hits:
                run[int(hits[0][0])] = {doc_id: float(score) for _, score, doc_id in hits}
        return Hits.from_ranked([ranked(run[i])[:k] for i in range(count)], k)
