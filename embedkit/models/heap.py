"""glibc's malloc thresholds fixed at the ceiling its own dynamic rule reaches, for CPU encoding.

A forward pass allocates and frees tens of megabytes of activations per batch. glibc serves blocks above its mmap
threshold with ``mmap`` and hands the free top of its heap back to the kernel above its trim threshold (both 128 KB
at first); it raises them (trim to twice mmap) only as large mapped blocks are freed, so how often a batch faults
its memory in again (zeroed pages) depends on the process's history. On this project's 2-core machine a forward of
62x66 tokens took up to 23,000 minor faults, about 1.2 µs each: 174.5-177.9 ms against 142.4-152.1 without them, and
sentence-transformers' autocast forward up to 29,000 (245-257 ms against 193-225; ``benchmarks/RESULTS.md``, issue
16). Fixed at glibc's own ceiling (mmap 32 MB, trim 64 MB: where a process stands after freeing one 32 MB block) the
heap's pages stay mapped between batches, at the cost of holding up to 64 MB of freed memory. The setting is
process-wide, so it is made once, on the first CPU encode, and only where the C library is glibc and the user has
not tuned malloc already (``MALLOC_*_`` or ``glibc.malloc`` in ``GLIBC_TUNABLES``); elsewhere (macOS, musl) nothing
changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: the highest the dynamic rule goes
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # the dynamic rule keeps trim at twice the mmap threshold

_state: str | None = None


def steady() -> str:
    """Set the thresholds once per process; returns what was done, for a benchmark's record:
    ``"glibc mmap 32 MiB, trim 64 MiB"`` or why not."""
    global _state
    if _state is None:
        _state = _apply()
    return _state


def _apply() -> str:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return f"unchanged ({platform.system()} {platform.libc_ver()[0] or 'libc'})"
    tuned = [name for name in os.environ if name.startswith("MALLOC_") and name.endswith("_")]
    if "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        tuned.append("GLIBC_TUNABLES")
    if tuned:
        return f"unchanged (the user's {', '.join(sorted(tuned))})"
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    if not (libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return "unchanged (mallopt refused)"
    return f"glibc mmap {MMAP_THRESHOLD >> 20} MiB, trim {TRIM_THRESHOLD >> 20} MiB"
