"""Peak resident memory of the current process, for the benchmarks' child processes."""

from __future__ import annotations

import resource
import sys
from pathlib import Path


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far, in MiB.

    Linux's VmHWM, not ``ru_maxrss``: a forked child's ``ru_maxrss`` starts at its parent's peak and keeps it through
    exec, so a child started by a parent that once held more would report the parent's peak as its own.
    """
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024
