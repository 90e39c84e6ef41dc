"""Device choice and mixed-precision autocast, so the same code runs on CUDA, MPS or CPU."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from embedkit.errors import EmbedkitError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device(device: str | None = None) -> str:
    """The requested device (refused when this machine lacks it), or the best one present: CUDA, then MPS, then CPU."""
    if device:
        try:
            kind = torch.device(device).type
        except (RuntimeError, ValueError):
            raise EmbedkitError(f"unknown device '{device}' (cuda, cuda:N, mps or cpu)", field="device") from None
        if kind == "cuda" and not torch.cuda.is_available():
            raise EmbedkitError(f"'{device}' was asked for, but torch sees no CUDA device here", field="device")
        if kind == "cuda" and (torch.device(device).index or 0) >= torch.cuda.device_count():
            count = torch.cuda.device_count()
            raise EmbedkitError(f"'{device}' was asked for, but torch sees {count} CUDA devices", field="device")
        if kind == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise EmbedkitError(f"'{device}' was asked for, but MPS is not available here", field="device")
        return device
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


@contextlib.contextmanager
def autocast(device: str, dtype: str) -> Iterator[None]:
    """Autocast to ``dtype`` on ``device``; float32 runs without autocast."""
    if dtype == "float32":
        yield
        return
    with torch.autocast(device_type=torch.device(device).type, dtype=DTYPES[dtype]):
        yield
