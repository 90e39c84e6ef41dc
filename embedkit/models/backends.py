"""Fast CPU inference backends: dynamic int8 torch (``models/int8.py``), and ONNX Runtime in float32 or dynamic int8
(``models/onnx.py``).

Only the transformer network inside the sentence-transformers stack is swapped. Tokenisation, pooling and
normalisation stay the stack's own modules, so embedkit's token-budget batching, the pooling modules after the
network and normalisation behave exactly as with the plain torch backend.
"""

from __future__ import annotations

from typing import Any

from sentence_transformers import SentenceTransformer

from embedkit.models.int8 import quantize_torch
from embedkit.models.onnx import use_onnx


def apply_backend(st: SentenceTransformer, backend: str) -> dict[str, Any]:
    """Swap the network of ``st`` for ``backend`` in place; returns what is recorded as ``backend_config``."""
    if backend == "torch":
        return {}
    if backend == "torch-int8":
        return quantize_torch(st)
    return use_onnx(st, quantized=backend == "onnx-int8")
