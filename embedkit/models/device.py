"""Device choice and mixed-precision autocast, so the same code runs on CUDA, MPS or CPU."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device(device: str | None = None) -> str:
    """The requested device, or the best one present: CUDA, then MPS, then CPU."""
    if device:
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
