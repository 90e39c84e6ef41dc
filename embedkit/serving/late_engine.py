"""``LateInteractionEngine``: the serving engine over a multi-vector model's index (exact MaxSim).

The same batches as ``SparseEngine``: every text of a batch encoded in one ``encode_queries`` call, each request
searched at its own ``k`` through the index's own search, so the answers are the library's; embeddings are each
text's token vectors (a list of vectors per text).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedkit.index.faiss_helpers import check_model_settings
from embedkit.search.late_interaction import LATE_IDENTITY, check_multivector_model
from embedkit.serving.sparse_engine import SparseEngine


class LateInteractionEngine(SparseEngine):
    def __init__(self, model: Any, index: Any, dataset: Any = None, snippet_chars: int = 300, index_path=None) -> None:
        check_multivector_model(model)
        check_model_settings({key: index.settings.get(key) for key in LATE_IDENTITY}, model.settings)
        self.model, self.index, self.dataset, self.snippet_chars = model, index, dataset, snippet_chars
        self.index_path = None if index_path is None else str(Path(index_path).resolve())
        self.model_settings = model.settings

    def describe(self) -> dict[str, Any]:
        return {
            "index": {
                "path": self.index_path,
                "engine": "exact-maxsim",
                "count": len(self.index),
                "dim": self.model.dim,
            },
            "model": {**self.model_settings, "device": self.model.device},
            "dataset": None if self.dataset is None else {"name": self.dataset.name, "path": str(self.dataset.path)},
        }

    def _search(self, rows: Any, k: int) -> list[list[tuple[str, float]]]:
        return self.index.search(rows, k)
