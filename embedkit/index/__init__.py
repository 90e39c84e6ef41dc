"""Stage 4: FAISS indexes from any factory string, on GPU when present, saved in pyserini's layout."""

from embedkit.index.faiss_index import Index

__all__ = ["Index"]
