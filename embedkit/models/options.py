"""The names a model can be run with (dtype, backend, device), checked without importing torch.

The CLI checks its flags with these before it loads anything heavy, and ``load_model`` checks them again, so a bad
value is one line whether it comes from a flag or from Python.
"""

from __future__ import annotations

import re

from embedkit.errors import EmbedkitError
from embedkit.validation import check_number

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


def longest_input(config: object) -> int | None:
    """Tokens the network can read at once: its position table (``max_position_embeddings``), less the padding rows
    RoBERTa-likes keep at its start; None when the config has no table (a rotary or static model)."""
    positions = getattr(config, "max_position_embeddings", None)
    if not isinstance(positions, int) or positions < 1:
        return None
    model_type = str(getattr(config, "model_type", ""))
    if "roberta" in model_type or model_type in ("camembert", "longformer"):
        positions -= int(getattr(config, "pad_token_id", 1) or 0) + 1
    return positions


def stack_limit(model: object) -> int | None:
    """``longest_input`` of a sentence-transformers stack (a ``SentenceTransformer`` or ``CrossEncoder``) whose first
    module is a transformer; None for a static model, which has no position table."""
    network = getattr(model[0], "auto_model", None)  # type: ignore[index]
    return None if network is None else longest_input(getattr(network, "config", None))


def check_max_length(max_length: int | None, limit: int | None, field: str = "max_length", path=None) -> None:
    """Refuse a ``max_length`` beyond what the model reads: past its position table, torch fails deep in the
    embedding lookup (an index error, or a device-side assert on a GPU) after the data was loaded."""
    if max_length is None:
        return
    check_number(max_length, field, minimum=1, path=path)
    if limit is not None and max_length > limit:
        raise EmbedkitError(
            f"must be at most {limit}, the longest input this model reads (its position embeddings), not {max_length}",
            path=path,
            field=field,
        )
