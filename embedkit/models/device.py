"""Device choice, the CPU's bf16 capability and mixed-precision autocast, so the same code runs on CUDA, MPS or CPU."""

from __future__ import annotations

import contextlib
import functools
import platform
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

from embedkit.errors import EmbedkitError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
CPU_INFO = Path("/proc/cpuinfo")
_BF16_FLAGS = {"avx512_bf16", "amx_bf16", "bf16"}  # x86 AVX-512 BF16 and AMX; Arm's FEAT_BF16 ("bf16" on Linux)


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


def cpu_flags() -> set[str]:
    """The processor's feature flags as the OS reports them (Linux ``/proc/cpuinfo``, macOS ``sysctl``); empty where
    neither answers."""
    if CPU_INFO.is_file():
        for line in CPU_INFO.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("flags", "Features"):  # x86, Arm
                return set(value.split())
        return set()
    if platform.system() == "Darwin":
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            answer = subprocess.run(
                ["sysctl", "-n", "hw.optional.arm.FEAT_BF16"], capture_output=True, text=True, timeout=5
            )
            return {"bf16"} if answer.stdout.strip() == "1" else set()
    return set()


@functools.cache
def cpu_has_bfloat16() -> bool:
    """True where the CPU has bf16 instructions. Elsewhere torch's bf16 products run a generic kernel several times
    slower than float32, so asking for bf16 there buys nothing but rounding."""
    return bool(cpu_flags() & _BF16_FLAGS)


@functools.cache
def _warn_no_bfloat16() -> None:
    warnings.warn(
        "this CPU has no bf16 instructions: running float32 instead of bfloat16 (as fast or faster here)", stacklevel=4
    )


def effective_dtype(device: str, dtype: str) -> str:
    """``dtype``, except bfloat16 on a CPU without bf16 instructions, which runs (and is recorded as) float32, with
    one warning per process."""
    if dtype == "bfloat16" and torch.device(device).type == "cpu" and not cpu_has_bfloat16():
        _warn_no_bfloat16()
        return "float32"
    return dtype


@contextlib.contextmanager
def autocast(device: str, dtype: str) -> Iterator[None]:
    """Autocast to ``dtype`` on ``device``; float32 runs without autocast."""
    if dtype == "float32":
        yield
        return
    with torch.autocast(device_type=torch.device(device).type, dtype=DTYPES[dtype]):
        yield
