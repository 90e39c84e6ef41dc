"""embedkit: dense retrieval from corpus to bi-encoder to FAISS index to a BEIR report."""

from embedkit.data import BeirDataset, load_dataset
from embedkit.encode import EmbeddingsFolder, encode_to_folder
from embedkit.errors import EmbedkitError
from embedkit.evaluate import compute_metrics, evaluate
from embedkit.index import Index
from embedkit.models import EmbeddingModel, load_model
from embedkit.search import dense_search, read_run, write_run

__version__ = "0.1.0"

__all__ = [
    "BeirDataset",
    "EmbeddingModel",
    "EmbeddingsFolder",
    "EmbedkitError",
    "Index",
    "__version__",
    "compute_metrics",
    "dense_search",
    "encode_to_folder",
    "evaluate",
    "load_dataset",
    "load_model",
    "read_run",
    "write_run",
]
