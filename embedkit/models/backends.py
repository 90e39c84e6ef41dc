"""Fast CPU inference backends: dynamic int8 torch (``models/int8.py``), ONNX Runtime in float32 or dynamic int8
(``models/onnx.py``), OpenVINO in float32 or bfloat16 (``models/openvino_backend.py``: the default of bfloat16 on a
CPU where OpenVINO has bf16 kernels), and the torch backend's own bfloat16 path on the CPU (``models/cpu_bfloat16.py``:
oneDNN's bf16 kernels where the CPU has bf16 instructions, bf16 operands through the fp32 kernels elsewhere).

Only the transformer network inside the sentence-transformers stack is swapped. Tokenisation, pooling and
normalisation stay the stack's own modules, so embedkit's token-budget batching, the pooling modules after the
network and normalisation behave exactly as with the plain torch backend.
"""

from __future__ import annotations

import warnings
from typing import Any

from sentence_transformers import SentenceTransformer

from embedkit.errors import EmbedkitError
from embedkit.models import cpu_bfloat16
from embedkit.models.int8 import quantize_torch
from embedkit.models.onnx import text_transformer, use_onnx
from embedkit.models.openvino_backend import cpu_has_bfloat16, use_openvino


def choose_backend(st: SentenceTransformer, backend: str | None, dtype: str, device: str) -> tuple[str, dict[str, Any]]:
    """Apply ``backend`` to ``st``; None is the fastest measured for this device and dtype: openvino for bf16 on a
    CPU where OpenVINO has bf16 kernels and the network exports, else torch (with a warning if the export failed).
    Returns the backend's name and its ``backend_config``."""
    if backend is not None:
        return backend, apply_backend(st, backend, dtype, device)
    if device == "cpu" and dtype == "bfloat16" and _exportable(st) and cpu_has_bfloat16():
        try:
            return "openvino", use_openvino(st, dtype)
        except EmbedkitError as error:
            warnings.warn(f"OpenVINO cannot run this model ({error}); using the torch backend", stacklevel=3)
    return "torch", apply_backend(st, "torch", dtype, device)


def _exportable(st: SentenceTransformer) -> bool:
    try:
        text_transformer(st, "openvino")
    except EmbedkitError:
        return False
    return True


def apply_backend(st: SentenceTransformer, backend: str, dtype: str, device: str) -> dict[str, Any]:
    """Swap the network of ``st`` for ``backend`` in place; returns what is recorded as ``backend_config``."""
    if backend == "torch":
        network = getattr(st[0], "auto_model", None)
        if network is None or not cpu_bfloat16.supported(device, dtype):
            return {}
        return cpu_bfloat16.prepare(network)
    if backend == "torch-int8":
        return quantize_torch(st)
    if backend == "openvino":
        return use_openvino(st, dtype)
    return use_onnx(st, quantized=backend == "onnx-int8")
