"""Stage 2: models as sentence-transformers module stacks, with the settings that change a score."""

from typing import TYPE_CHECKING

from embedkit._lazy import lazy_exports

_EXPORTS = {
    "Chunking": "embedkit.models.chunking",
    "DEFAULT_MODEL_NAME": "embedkit.models.reference",
    "EmbeddingModel": "embedkit.models.embedding_model",
    "default_model_path": "embedkit.models.reference",
    "load_model": "embedkit.models.loading",
    "load_model_from_settings": "embedkit.models.loading",
    "pick_device": "embedkit.models.device",
}
__all__ = [
    "DEFAULT_MODEL_NAME",
    "Chunking",
    "EmbeddingModel",
    "default_model_path",
    "load_model",
    "load_model_from_settings",
    "pick_device",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from embedkit.models.chunking import Chunking
    from embedkit.models.device import pick_device
    from embedkit.models.embedding_model import EmbeddingModel
    from embedkit.models.loading import load_model, load_model_from_settings
    from embedkit.models.reference import DEFAULT_MODEL_NAME, default_model_path
