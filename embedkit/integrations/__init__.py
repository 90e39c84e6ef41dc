"""Thin adapters to pyserini and MTEB: the only modules that import those libraries (both optional extras)."""
