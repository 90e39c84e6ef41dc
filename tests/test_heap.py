"""The malloc thresholds a CPU encode fixes (``embedkit/models/heap.py``), checked by the page faults they save.

Each check runs in a fresh interpreter: the setting is process-wide and glibc's own thresholds depend on the
process's history.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting applies to glibc only")

# 24 blocks of 1 MB, freed together, five times over. With glibc's starting thresholds (128 KB; set explicitly for
# the control, since where glibc's own dynamic thresholds stand depends on the process's history) every block is
# mapped and unmapped, so each cycle faults its 6,144 pages in again; fixed at their ceiling they stay mapped.
CYCLES = """
import ctypes, json, resource, sys
import torch
from embedkit.models import heap
if sys.argv[1] == "encode":
    from embedkit import load_model
    load_model().encode(["a short text", "and another"], show_progress=False)
elif sys.argv[1] == "steady":
    heap.steady()
else:
    libc = ctypes.CDLL("libc.so.6")
    assert libc.mallopt(heap.M_MMAP_THRESHOLD, 128 << 10) and libc.mallopt(heap.M_TRIM_THRESHOLD, 128 << 10)
def cycle():
    blocks = [torch.empty(1 << 20, dtype=torch.uint8).fill_(1) for _ in range(24)]
    del blocks
cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    cycle()
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5
print(json.dumps({"faults_per_cycle": faults, "state": heap._state}))
"""


def _cycles(mode: str, **env: str) -> dict:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    command = [sys.executable, "-c", CYCLES, mode]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env={**environment, **env})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_fixed_thresholds_keep_freed_pages_mapped() -> None:
    start, steady = _cycles("start"), _cycles("steady")
    assert start["state"] is None and steady["state"] == "glibc mmap 32 MiB, trim 64 MiB"
    assert start["faults_per_cycle"] >= 6000  # 24 MB = 6,144 pages, faulted in again every cycle
    assert steady["faults_per_cycle"] < 1000


def test_a_cpu_encode_fixes_them() -> None:
    encoded = _cycles("encode")
    assert encoded["state"] == "glibc mmap 32 MiB, trim 64 MiB"
    assert encoded["faults_per_cycle"] < 1000


def test_a_users_own_malloc_tuning_is_left_alone() -> None:
    kept = _cycles("steady", MALLOC_TRIM_THRESHOLD_="131072")
    assert kept["state"] == "unchanged (the user's MALLOC_TRIM_THRESHOLD_)"
    assert kept["faults_per_cycle"] >= 6000  # glibc's own trim threshold of 128 KB still hands every cycle back
    tunables = _cycles("steady", GLIBC_TUNABLES="glibc.malloc.trim_threshold=131072")
    assert tunables["state"] == "unchanged (the user's GLIBC_TUNABLES)"
