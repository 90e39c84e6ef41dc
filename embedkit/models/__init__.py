"""Stage 2: models as sentence-transformers module stacks, with the settings that change a score."""

from embedkit.models.device import pick_device
from embedkit.models.embedding_model import EmbeddingModel
from embedkit.models.loading import DEFAULT_MODEL_NAME, default_model_path, load_model

__all__ = ["DEFAULT_MODEL_NAME", "EmbeddingModel", "default_model_path", "load_model", "pick_device"]
