"""Package namespaces that import their members on first use (PEP 562).

``import embedkit.encode.layout`` must not pull in torch because ``embedkit/encode/__init__.py`` re-exports the
encoder, and ``embedkit compare --help`` must not load FAISS: every package ``__init__`` lists its public names
here instead of importing them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose public ``name`` lives in module ``exports[name]``."""
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module '{package}' has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
