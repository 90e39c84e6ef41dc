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
from typing import Any

import numpy as np

from embedkit.data.trec import ranked
from embedkit.errors import EmbedkitError
from embedkit.outputs import check_output_folder, commit_folder, output_lock, recover
from embedkit.sparse import SparseRows
from embedkit.storage import NEW_MARK, read_json, write_json
from embedkit.validation import check_whole

KIND = "sparse-index"
FORMAT = f"embedkit.{KIND}/1"
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
            write_json(work / "meta.json", {
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


class SeismicSparse:
    """Searches a Seismic index with sparse query vectors."""

    def __init__(self, folder: str | Path, query_cut: int | None = None, heap_factor: float | None = None) -> None:
        self.folder = Path(folder)
        meta = read_json(self.folder / "meta.json", "index metadata") if (self.folder / "meta.json").is_file() else {}
        path = self.folder / f"{INDEX_FILE}.index.seismic"
        if not (isinstance(meta, dict) and meta.get("engine") == ENGINE and path.is_file()):
            raise EmbedkitError("not an embedkit Seismic index", path=self.folder, field="--index")
        self.meta = meta
        self.search_params = {"query_cut": query_cut or SEARCH["query_cut"],
                              "heap_factor": heap_factor or SEARCH["heap_factor"]}  # fmt: skip
        self.index = _seismic().SeismicIndex.load(str(path))

    @property
    def settings(self) -> dict[str, Any]:
        """The settings of the model whose vectors the index holds (as ``SparseExactIndex.settings``)."""
        return self.meta["settings"]

    def search(self, query_ids: Sequence[str], rows: SparseRows, names: Any, k: int) -> dict[str, dict[str, float]]:
        """Each query's top ``k`` (``names`` is unused: the index's terms are dimension numbers)."""
        check_whole(k, "k", minimum=1)
        seismic = _seismic()
        positions = {f"{i}": query_id for i, query_id in enumerate(query_ids)}  # ids the string type cannot cut
        components = [_terms(seismic, rows.row(i)[0]) for i in range(len(query_ids))]
        values = [rows.row(i)[1].astype(np.float32) for i in range(len(query_ids))]
        found = self.index.batch_search(
            queries_ids=_terms(seismic, np.arange(len(query_ids))), query_components=components,
            query_values=values, k=int(k), **self.search_params, num_threads=1,
        )  # fmt: skip
        run: dict[str, dict[str, float]] = {query_id: {} for query_id in query_ids}
        for hits in found:
            if hits:
                run[positions[hits[0][0]]] = {doc_id: float(score) for _, score, doc_id in hits}
        return {query_id: dict(ranked(hits)[:k]) for query_id, hits in run.items()}
