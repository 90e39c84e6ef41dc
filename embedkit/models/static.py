"""The static tier: any sentence-transformers model distilled into one vector per token with model2vec.

A static model embeds a text as the normalised mean of its tokens' vectors: no attention, no layers, hundreds of
times cheaper than the transformer it came from, at a cost in quality that ``benchmarks/RESULTS.md`` measures rather
than assumes. model2vec distils offline from the teacher's own vocabulary (each token run through the teacher, then
PCA and SIF weighting); the result is saved as a plain sentence-transformers folder (``StaticEmbedding`` +
``Normalize``), so ``load_model``, ``encode``, ``evaluate`` and ``serve`` take it like any other model.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path

from embedkit.environment import library_versions
from embedkit.errors import EmbedkitError
from embedkit.models.reference import resolve_model, weights_sha256
from embedkit.outputs import replace_folder
from embedkit.storage import write_json

STATIC_KIND = "static"
STATIC_RECORD = "embedkit_static.json"
STATIC_MISSING = "distill-static needs model2vec; install it with: pip install 'embedkit[static]'"


@dataclass(frozen=True)
class StaticSettings:
    """What changes the distilled vectors (recorded beside them)."""

    pca_dims: int | None = 256  # None keeps the teacher's width
    sif_coefficient: float | None = 1e-4  # down-weights frequent tokens (None: plain mean)

    def check(self) -> StaticSettings:
        if self.pca_dims is not None and self.pca_dims < 2:
            raise EmbedkitError(f"must be at least 2, not {self.pca_dims}", field="--pca-dims")
        if self.sif_coefficient is not None and not 0 < self.sif_coefficient < 1:
            raise EmbedkitError(f"must be in (0, 1), not {self.sif_coefficient}", field="--sif-coefficient")
        return self


def distill_static(
    model: str | Path | None, output: str | Path, settings: StaticSettings | None = None, overwrite: bool = False
) -> Path:
    """Distil ``model`` (``None``: the packaged default) into a static model folder at ``output``."""
    settings = (settings or StaticSettings()).check()
    try:
        from model2vec.distill import distill
    except ImportError:
        raise EmbedkitError(STATIC_MISSING) from None
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding

    teacher = resolve_model(model)
    source = str(teacher.path) if teacher.path.is_dir() else teacher.name
    weighting = {"pca_dims": settings.pca_dims, "sif_coefficient": settings.sif_coefficient}
    distilled = distill(source, **weighting, device="cpu", quantize_to="float32")
    with tempfile.TemporaryDirectory() as scratch:  # model2vec's own folder, read back by sentence-transformers
        distilled.save_pretrained(scratch)
        static = StaticEmbedding.from_model2vec(scratch)
    student = SentenceTransformer(modules=[static, Normalize()], device="cpu")
    with replace_folder(output, STATIC_KIND, overwrite) as folder:
        student.save(str(folder))
        record = {
            "format": f"embedkit.{STATIC_KIND}/1",
            "teacher": {
                "model": teacher.name,
                "weights_sha256": weights_sha256(teacher.path) if teacher.path.is_dir() else None,
            },
            "settings": asdict(settings),
            "dim": student.get_embedding_dimension(),
            "library_versions": {**library_versions(), "model2vec": version("model2vec")},
        }
        write_json(folder / STATIC_RECORD, record)
    return Path(output)
