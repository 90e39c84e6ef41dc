"""A real SIGKILL (strace's fault injection) at the system calls of an add batch, a delete and a compaction of a live
index: reopening gives the documents before the change or after it, never a mix, and ``check`` finds the store and
the vectors in agreement. ``make test`` kills at a few points per change; ``make test-slow`` at every one."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import embedkit_here as embedkit

from embedkit.index import Index
from embedkit.index.live import LiveIndex

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is needed to inject the kill")
CALLS = ("pwrite64", "write", "fdatasync", "fsync", "rename", "renameat2", "unlink", "unlinkat")
LINE = re.compile(r"^(?:\d+\s+)?(\w+)\((.*)\)\s+=\s+(-?\d+)")
SCRIPT = Path(__file__).with_name("live_change.py")


def _run(operation: str, folder: Path, strace: list[str]) -> subprocess.CompletedProcess:
    command = ["strace", "-qq", *strace, sys.executable, str(SCRIPT), operation, str(folder)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def _live_ids(folder: Path) -> set[str]:
    """The live ids after ``embedkit index check`` (the command users run) found the folder consistent."""
    checked = embedkit("index", "check", "-i", folder)
    assert checked.returncode == 0 and json.loads(checked.stdout)["ok"], checked.stdout + checked.stderr
    live = LiveIndex.load_live(folder)
    live.store.close()  # now, not when collected: the last close folds the WAL in and would change the folder later
    return {doc_id for doc_id in live.ids if doc_id is not None}


def _points(operation: str, folder: Path, tmp: Path) -> list[tuple[str, int]]:
    """``(syscall, n)`` of every write, sync, rename and unlink after the script's marker (``n`` counts that
    syscall from the start of the run, as strace's ``when=`` does); the traced run completes."""
    log = tmp / "strace.log"
    result = _run(operation, folder, ["-e", f"trace={','.join(CALLS)}", "-o", str(log)])
    assert result.returncode == 0, result.stderr
    seen: dict[str, int] = {}
    points, marked = [], False
    for line in log.read_text().splitlines():
        if (match := LINE.match(line)) is None:
            continue
        name = match[1]
        seen[name] = seen.get(name, 0) + 1
        if marked and (name != "write" or "store.sqlite" not in match[2]):
            points.append((name, seen[name]))
        marked = marked or (name in ("unlink", "unlinkat") and ".mark" in match[2])
    assert marked and points
    return points


@pytest.fixture(scope="module", params=["Flat", "IVF8,Flat on disk"])
def pristine(request, scifact_embeddings, tmp_path_factory) -> Path:
    from embedkit.index import BuildSettings, Vectors
    from embedkit.index.ondisk import build_ondisk

    matrix = np.asarray(scifact_embeddings.embeddings()[:300], dtype=np.float32)
    folder = tmp_path_factory.mktemp("live-kill") / "idx"
    vectors = Vectors.of(matrix, scifact_embeddings.ids()[:300])
    if request.param == "Flat":
        Index.from_vectors(vectors, BuildSettings("Flat", use_gpu=False)).save(folder)
    else:
        build_ondisk(vectors, folder, BuildSettings("IVF8,Flat", use_gpu=False, nprobe=8))
    live = LiveIndex.open(folder, fields={"bucket": "int"}, vectors=matrix)
    live.delete(scifact_embeddings.ids()[:3])  # a tombstone to compact
    live.store.close()
    return folder


@pytest.mark.parametrize("every", [False, pytest.param(True, marks=pytest.mark.slow)])
@pytest.mark.parametrize("operation", ["add", "delete", "compact"])
def test_a_kill_at_any_write_leaves_the_state_before_or_after(pristine, tmp_path, operation, every):
    before = _live_ids(pristine)
    done = tmp_path / "done"
    shutil.copytree(pristine, done)
    points = _points(operation, done, tmp_path)
    after = _live_ids(done)
    assert after != before or operation == "compact"
    chosen = points if every else [points[0], points[len(points) // 2], points[-1]]
    outcomes = set()
    for name, n in chosen:
        copy = tmp_path / f"kill-{name}-{n}"
        shutil.copytree(pristine, copy)
        result = _run(operation, copy, ["-e", f"trace={name}", "-e", f"inject={name}:signal=SIGKILL:when={n}"])
        assert result.returncode == -9, (name, n, result.returncode, result.stderr[-500:])
        found = _live_ids(copy)
        assert found in (before, after), (name, n)
        outcomes.add("before" if found == before else "after")
        later = LiveIndex.load_live(copy)
        later.compact()  # a later writer goes on: the killed one's lock and temporaries are gone
        later.store.close()
        assert _live_ids(copy) == found
        shutil.rmtree(copy)
    assert outcomes == {"before", "after"} or operation == "compact"
