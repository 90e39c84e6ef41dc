"""Inference backends a user asks for by name: dynamic int8 torch (``models/int8.py``), ONNX Runtime in float32 or
dynamic int8 (``models/onnx.py``, extra ``embedkit[onnx]``), OpenVINO in float32 or bfloat16
(``models/openvino_backend.py``, extra ``embedkit[openvino]``). The default is ``torch``: sentence-transformers'
own modules, under autocast for bfloat16/float16, so a default encode computes what sentence-transformers computes.

Only the transformer network inside the sentence-transformers stack is swapped. Tokenisation, pooling and
normalisation stay the stack's own modules, so embedkit's token-budget batching, the pooling modules after the
network and normalisation behave exactly as with the plain torch backend. An engine's packages are imported only
when its backend is asked for.
"""

from __future__ import annotations

from typing import Any

from sentence_transformers import SentenceTransformer


def apply_backend(st: SentenceTransformer, backend: str, dtype: str) -> dict[str, Any]:
    """Swap the network of ``st`` for ``backend`` in place; returns what is recorded as ``backend_config``."""
    if backend == "torch":
        return {}
    if backend == "torch-int8":
        from embedkit.models.int8 import quantize_torch

        return quantize_torch(st)
    if backend == "openvino":
        from embedkit.models.openvino_backend import use_openvino

        return use_openvino(st, dtype)
    from embedkit.models.onnx import use_onnx

    return use_onnx(st, quantized=backend == "onnx-int8")
