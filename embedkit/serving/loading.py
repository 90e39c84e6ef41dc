"""``load_engine``: an index folder, the model recorded in it (or another given) and an optional dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedkit.errors import EmbedkitError
from embedkit.serving.engine import Engine


def load_engine(
    index: str | Path,
    *,
    dataset: str | Path | None = None,
    data_dir: str | Path | None = None,
    nprobe: int | None = None,
    ef_search: int | None = None,
    snippet_chars: int = 300,
    aggregation: Any = None,
    **runtime: Any,
) -> Engine:
    """Open everything a server needs, files first (a bad index or dataset fails before the model loads).

    ``runtime`` is ``model``, ``dtype``, ``device``, ``backend``: as for ``load_model_from_settings``;
    ``aggregation`` how a chunked index's chunk scores make a document's (``embedkit.search.chunks``).
    """
    from embedkit.data.beir import load_dataset
    from embedkit.index.registry import open_index
    from embedkit.models.loading import load_model_from_settings

    opened = open_index(index)  # files checked before any model loads
    if opened.engine != "faiss":  # the engines of sparse and token rows: searched through their own parameters
        from embedkit.serving.sparse_engine import SparseEngine

        if nprobe is not None or ef_search is not None:
            raise EmbedkitError("--nprobe and --ef-search search a FAISS index, not this one", field="--nprobe")
        if aggregation is not None:
            raise EmbedkitError("combines chunk scores of a FAISS index of chunks, not this one", field="--aggregation")
        data = load_dataset(dataset, data_dir=data_dir) if dataset is not None else None
        model = load_model_from_settings(opened.model_settings, **runtime)
        return SparseEngine(model, opened, data, snippet_chars=snippet_chars, index_path=index)
    if nprobe is not None or ef_search is not None:
        opened.set_search_params(nprobe=nprobe, ef_search=ef_search)
    data = None
    if dataset is not None:
        data = load_dataset(dataset, data_dir=data_dir)
        data.row_of  # noqa: B018 - reads the corpus now, so a broken corpus file fails before the model loads
    model = load_model_from_settings(opened.model_settings, **runtime)
    return Engine(model, opened, data, snippet_chars=snippet_chars, index_path=index, aggregation=aggregation)
