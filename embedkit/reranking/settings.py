"""``RerankSettings``: what a reranking stage is, checked without importing torch (the CLI checks flags first)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from embedkit.errors import EmbedkitError
from embedkit.models.options import DTYPE_NAMES
from embedkit.models.reference import ModelReference, resolve_model
from embedkit.storage import read_json
from embedkit.validation import check_number

MAX_BATCH_SIZE = 1_000_000  # pairs per forward pass; more only exhausts memory


@dataclass(frozen=True)
class RerankSettings:
    """A sentence-transformers ``CrossEncoder`` (folder or Hub name) re-scoring each query's top ``depth`` hits.

    Scores are the model's raw logits (no sigmoid): a sigmoid rounds strong scores to exactly 1.0 in float32, which
    would tie them. ``max_length`` caps the query-and-document pair in tokens (default: the model's own).
    ``first_stage_weight`` w > 0 scores a hit ``(1 - w) * min-max(logit) + w * min-max(first-stage score)`` within
    each query's top ``depth`` (pyserini's rule for fusing scores on different scales): a reranker weaker than its
    first stage on some queries can still add to it, with w chosen on a dev set.
    """

    model: str
    depth: int = 100
    batch_size: int = 32
    max_length: int | None = None
    dtype: str = "float32"  # float32 | bfloat16 | float16 (autocast; scores are upcast to float32)
    device: str | None = None
    first_stage_weight: float = 0.0

    def check(self, prefix: str = "") -> RerankSettings:
        """Refuses a bad setting naming it with ``prefix`` (``--`` names the CLI flag, ``rerank_`` evaluate's)."""
        if not self.model:
            raise EmbedkitError("needs a cross-encoder model", field=f"{prefix}model")

        def flag(name: str) -> str:
            return prefix + (name.replace("_", "-") if prefix.startswith("-") else name)

        check_number(self.depth, flag("depth"), minimum=1)  # past a query's hits it reranks them all
        check_number(self.batch_size, flag("batch_size"), minimum=1, maximum=MAX_BATCH_SIZE)
        check_number(self.max_length, flag("max_length"), minimum=1)  # its upper bound is the model's (on load)
        check_number(self.first_stage_weight, flag("first_stage_weight"), minimum=0, maximum=1)
        if self.dtype not in DTYPE_NAMES:
            raise EmbedkitError(f"unknown dtype '{self.dtype}' ({' | '.join(DTYPE_NAMES)})", field=f"{prefix}dtype")
        return self


def is_cross_encoder_folder(path: Path) -> bool:
    """A folder whose network is a sequence classifier (a trained cross-encoder), not a bi-encoder stack whose
    classification head sentence-transformers would create at random."""
    config = read_json(path / "config.json") if (path / "config.json").is_file() else {}
    architectures = (config.get("architectures") or []) if isinstance(config, dict) else []
    return any(str(name).endswith("ForSequenceClassification") for name in architectures)


def resolve_cross_encoder(name: str, flag: str = "reranker", late_interaction: bool = False) -> ModelReference:
    """Where a cross-encoder (or, with ``late_interaction``, a multi-vector model) loads from; a local folder that is
    neither is refused before torch loads."""
    from embedkit.models.multivector_model import is_multivector_folder

    reference = resolve_model(name)
    if late_interaction and reference.path.is_dir() and is_multivector_folder(reference.path):
        return reference
    if reference.path.is_dir() and not is_cross_encoder_folder(reference.path):
        raise EmbedkitError(
            "is not a cross-encoder (its config.json names no ...ForSequenceClassification architecture)",
            path=reference.path,
            field=flag,
        )
    return reference
