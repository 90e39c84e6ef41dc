"""Fast CPU inference backends: dynamic int8 torch (``models/int8.py``), ONNX Runtime in float32 or dynamic int8
(``models/onnx.py``), and the torch backend's own bfloat16 path on CPUs with bf16 instructions
(``models/cpu_bfloat16.py``).

Only the transformer network inside the sentence-transformers stack is swapped. Tokenisation, pooling and
normalisation stay the stack's own modules, so embedkit's token-budget batching, the pooling modules after the
network and normalisation behave exactly as with the plain torch backend.
"""

from __future__ import annotations

from typing import Any

from sentence_transformers import SentenceTransformer

from embedkit.models import cpu_bfloat16
from embedkit.models.int8 import quantize_torch
from embedkit.models.onnx import use_onnx


def apply_backend(st: SentenceTransformer, backend: str, dtype: str, device: str) -> dict[str, Any]:
    """Swap the network of ``st`` for ``backend`` in place; returns what is recorded as ``backend_config``."""
    if backend == "torch":
        network = getattr(st[0], "auto_model", None)
        if network is None or not cpu_bfloat16.supported(device, dtype):
            return {}
        return cpu_bfloat16.prepare(network)
    if backend == "torch-int8":
        return quantize_torch(st)
    return use_onnx(st, quantized=backend == "onnx-int8")
