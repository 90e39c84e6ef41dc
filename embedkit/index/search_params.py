"""FAISS search parameters (``nprobe``, ``efSearch``): read, set and bounded here so ``Index`` stays short."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import faiss

from embedkit.errors import EmbedkitError
from embedkit.index.faiss_helpers import check_rescore, check_whole, gpu_count


def set_binary_parameter(index: faiss.IndexBinary, name: str, value: int, factory: str | None) -> None:
    """``ParameterSpace`` does not know binary indexes: set IVF ``nprobe`` / HNSW ``efSearch`` directly."""
    inner = faiss.downcast_IndexBinary(index)
    if name == "nprobe" and isinstance(inner, faiss.IndexBinaryIVF):
        inner.nprobe = value
    elif name == "efSearch" and isinstance(inner, faiss.IndexBinaryHNSW):
        inner.hnsw.efSearch = value
    else:
        raise EmbedkitError(f"index '{factory}' has no search parameter '{name}'", field=name)


def unwrap(index: Any) -> Any:
    """The index under pre-transforms (OPQ, PCA, ...) and refinement wrappers."""
    inner = faiss.downcast_index(index)
    while True:
        if isinstance(inner, faiss.IndexPreTransform):
            inner = faiss.downcast_index(inner.index)
        elif isinstance(inner, faiss.IndexRefine):
            inner = faiss.downcast_index(inner.base_index)
        else:
            return inner


def current_search_param(index: Any, name: str) -> int:
    """The ``nprobe`` or ``efSearch`` FAISS searches ``index`` with now (set or default)."""
    if isinstance(index, faiss.IndexBinary):
        inner = faiss.downcast_IndexBinary(index)
        owner = inner if name == "nprobe" else getattr(inner, "hnsw", None)
    else:
        ivf = faiss.try_extract_index_ivf(index)
        inner = unwrap(index)
        if name == "nprobe":
            owner = ivf if ivf is not None else inner  # a GPU IVF index has nprobe itself
        else:
            hnsw_owner = inner if hasattr(inner, "hnsw") else None
            if hnsw_owner is None and ivf is not None:  # IVF with an HNSW coarse quantizer
                quantizer = faiss.downcast_index(ivf.quantizer)
                hnsw_owner = quantizer if hasattr(quantizer, "hnsw") else None
            owner = getattr(hnsw_owner, "hnsw", None)
    value = getattr(owner, "nprobe" if name == "nprobe" else "efSearch", None)
    if value is None:
        raise EmbedkitError(f"the index has no search parameter '{name}'", field=name)
    return int(value)


class SearchParams:
    """``Index``'s search parameters, kept in ``search_params`` and meta.json; it has ``faiss_index``, ``meta``,
    ``search_params``, ``binary`` and a length."""

    def _apply(self, params: dict[str, int]) -> None:
        """Set FAISS search parameters (``nprobe``, ``efSearch``) on the index, through OPQ or other pre-transforms."""
        for name, value in params.items():
            value = min(check_whole(value, name, 1), self._param_bound(name))
            if self.binary:
                set_binary_parameter(self.faiss_index, name, int(value), self.meta.get("factory"))
                continue
            space = faiss.GpuParameterSpace() if gpu_count() and hasattr(faiss, "GpuParameterSpace") else None
            space = space or faiss.ParameterSpace()
            try:
                space.set_index_parameter(self.faiss_index, name, int(value))
            except RuntimeError:
                raise EmbedkitError(
                    f"index '{self.meta.get('factory')}' has no search parameter '{name}'", field=name
                ) from None

    def set_search_params(
        self, nprobe: int | None = None, ef_search: int | None = None, rescore: int | None = None
    ) -> None:
        """Set the index's own IVF ``nprobe`` / HNSW ``efSearch`` and default ``rescore`` factor (0 = off); they are
        kept in ``meta.json``. (``search`` takes per-call values that do not stick.)"""
        params = {
            name: min(check_whole(value, name, 1), self._param_bound(name))
            for name, value in (("nprobe", nprobe), ("efSearch", ef_search))
            if value is not None
        }
        self._apply(params)
        self.search_params.update(params)
        if rescore is not None:
            self.search_params["rescore"] = check_rescore(rescore)
        self.meta["search_params"] = dict(self.search_params)

    def _param_bound(self, name: str) -> int:
        """The largest value worth passing to FAISS: ``nprobe`` past the number of lists and ``efSearch`` past the
        number of vectors change nothing, and a huge one would overflow FAISS's C int or allocate without end."""
        if name == "nprobe":
            ivf = None if self.binary else faiss.try_extract_index_ivf(self.faiss_index)
            inner = faiss.downcast_IndexBinary(self.faiss_index) if self.binary else ivf or unwrap(self.faiss_index)
            return max(1, int(getattr(inner, "nlist", 0) or 2**31 - 1))
        return max(1, min(len(self), 2**31 - 1))

    @contextlib.contextmanager
    def _temporary(self, params: dict[str, int | None]) -> Iterator[None]:
        """Search with ``params`` for the block only; the index's own settings (or FAISS's defaults) come back."""
        given = {name: value for name, value in params.items() if value is not None}
        before = {name: current_search_param(self.faiss_index, name) for name in given}
        self._apply(given)
        try:
            yield
        finally:
            self._apply(before)
