"""Stage 1: datasets on disk (BEIR layout) into corpus, queries and qrels."""

from embedkit.data.beir import BeirDataset, doc_text, load_dataset
from embedkit.data.resolve import resolve_dataset

__all__ = ["BeirDataset", "doc_text", "load_dataset", "resolve_dataset"]
