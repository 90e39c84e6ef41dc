"""The changes of an on-disk IVF index: its lists are mapped read-only, so added vectors go to an in-memory IVF with
the same trained quantizer (the ``delta``), searched beside it with the same parameters and merged; deletes are
tombstones in both until ``compact`` writes a new on-disk index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import faiss
import numpy as np


def delta_index(folder: Path) -> faiss.Index:
    """An empty in-memory copy of the on-disk index in ``folder`` (its header read without the lists)."""
    index = faiss.read_index(str(folder / "index"), faiss.IO_FLAG_SKIP_IVF_DATA)
    ivf = faiss.extract_index_ivf(index)
    lists = faiss.ArrayInvertedLists(ivf.nlist, ivf.code_size)
    ivf.own_invlists = False  # the header's placeholder lists were never opened: leave them, never free them
    ivf.replace_invlists(lists, True)
    lists.this.disown()  # the index owns the new lists now
    index.ntotal = ivf.ntotal = 0
    return index


def search_both(main: faiss.Index, delta: faiss.Index, queries: np.ndarray, k: int, params: Any, metric: str):
    """The top ``k`` of ``main`` and ``delta`` together (their labels are disjoint keys), FAISS's order kept."""
    scores, labels = main.search(queries, k, params=params)
    if delta is None or not delta.ntotal:
        return scores, labels
    more_scores, more_labels = delta.search(queries, k, params=params)
    scores, labels = np.hstack([scores, more_scores]), np.hstack([labels, more_labels])
    ranked = np.where(labels < 0, -np.inf if metric == "ip" else np.inf, scores)
    order = np.argsort(-ranked if metric == "ip" else ranked, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(labels, order, axis=1)
