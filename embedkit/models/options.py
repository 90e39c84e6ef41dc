"""The names a model can be run with (dtype, backend, device), checked without importing torch.

The CLI checks its flags with these before it loads anything heavy, and ``load_model`` checks them again, so a bad
value is one line whether it comes from a flag or from Python.
"""

from __future__ import annotations

import re

from embedkit.errors import EmbedkitError

DTYPE_NAMES = ("float32", "bfloat16", "float16")
BACKENDS = ("torch", "torch-int8", "onnx", "onnx-int8", "openvino")
CPU_ONLY = frozenset({"torch-int8", "onnx", "onnx-int8", "openvino"})
# dtypes a CPU backend runs in; the others run float32 only
CPU_DTYPES = {"openvino": ("float32", "bfloat16")}
POOLINGS = ("cls", "mean", "last", "max", "dupmae")
_DEVICE = re.compile(r"(cpu|mps|cuda(:\d+)?)")


def check_run_options(dtype: str, backend: str, device: str | None) -> str | None:
    """Validate dtype, backend and device names; CPU-only backends default to (and require) the CPU."""
    if dtype not in DTYPE_NAMES:
        raise EmbedkitError(f"unknown dtype '{dtype}' (choose from {', '.join(DTYPE_NAMES)})", field="dtype")
    if backend not in BACKENDS:
        raise EmbedkitError(f"unknown backend '{backend}' (choose from {', '.join(BACKENDS)})", field="backend")
    if device is not None and not _DEVICE.fullmatch(device):
        raise EmbedkitError(f"unknown device '{device}' (cpu, cuda, cuda:N or mps)", field="device")
    if backend not in CPU_ONLY:
        return device
    dtypes = CPU_DTYPES.get(backend, ("float32",))
    if dtype not in dtypes:
        raise EmbedkitError(f"the {backend} backend runs in {' or '.join(dtypes)}, not {dtype}", field="dtype")
    if device is not None and device != "cpu":
        raise EmbedkitError(
            f"the {backend} backend runs on the CPU only (asked for '{device}'); use backend torch on a GPU",
            field="backend",
        )
    return "cpu"
