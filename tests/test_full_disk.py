"""A full disk through the real CLI: one line naming the path and the space needed, exit 2, the old output whole,
no temporary file left.

Each case runs in a private mount namespace (``unshare``; as root, or as a user where user namespaces are allowed)
with the output's folder on a small tmpfs: the old output is copied there first, sized so it fits once but not twice,
then the command is asked to replace it (``--overwrite``), which needs the old and the new side by side until the swap.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli_env, write_scifact_slice
from test_bad_input import litter

from embedkit.storage import tree_bytes

# Inside the namespace: mount the tmpfs, copy the old output in, run the command, fingerprint what is left.
DRIVER = r"""
import json, shutil, subprocess, sys
sys.path.insert(0, {tests!r})
from test_bad_input import fingerprint, litter
old, disk, args = {old!r}, {disk!r}, {args!r}
target = disk + "/" + {name!r}
(shutil.copytree if __import__("os").path.isdir(old) else shutil.copy2)(old, target)
from pathlib import Path
before = fingerprint(Path(disk))
done = subprocess.run([sys.executable, "-m", "embedkit.cli", *args], capture_output=True, text=True, timeout=600)
print(json.dumps({{"code": done.returncode, "stderr": done.stderr, "same": fingerprint(Path(disk)) == before,
                  "litter": litter(Path(disk))}}))
"""


def _unshare() -> list[str]:
    if os.geteuid() == 0:
        return ["unshare", "-m"]
    return ["unshare", "-rm"]


def _probe_namespaces() -> None:
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed for the full-disk tests")
    done = subprocess.run([*_unshare(), "true"], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"cannot enter a mount namespace here: {done.stderr.strip()}")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, scifact) -> dict:
    """Real outputs of encode, index, evaluate and search on a small cut, to put on the small disk."""
    _probe_namespaces()
    work = tmp_path_factory.mktemp("full-disk")
    cut = write_scifact_slice(work / "cut", scifact, {"test": 10}, 60, 100)
    cache = work / "cache"
    steps = [
        ["encode", "-d", str(cut), "-o", "emb"],
        ["index", "-e", "emb", "-o", "idx"],
        ["evaluate", "-d", str(cut), "-o", "report", "--cache-dir", str(cache / "emb")],
        ["search", "-i", "idx", "-d", str(cut), "--split", "test", "-o", "run.trec", "-k", "50"],
    ]
    for args in steps:
        done = subprocess.run(
            [sys.executable, "-m", "embedkit.cli", *args], cwd=work, env=cli_env(cache), capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
    return {"work": work, "cut": cut, "cache": cache}


CASES = {
    # other settings, so the new embeddings are not the old ones resumed
    "encode": ("emb", lambda o, t: ["encode", "-d", str(o["cut"]), "-o", t, "--overwrite", "--max-length", "128"]),
    "index": ("idx", lambda o, t: ["index", "-e", str(o["work"] / "emb"), "-o", t, "--overwrite"]),
    "evaluate": (
        "report",
        lambda o, t: ["evaluate", "-d", str(o["cut"]), "-o", t, "--overwrite", "--cache-dir", str(o["cache"] / "emb")],
    ),
    "search": (
        "run.trec",
        lambda o, t: [
            *("search", "-i", str(o["work"] / "idx"), "-d", str(o["cut"])),
            *("--split", "test", "-o", t, "-k", "50", "--overwrite"),
        ],
    ),
}


@pytest.mark.parametrize("verb", list(CASES))
def test_full_disk_keeps_the_old_output(outputs, verb, tmp_path):
    name, command = CASES[verb]
    old = outputs["work"] / name
    size = tree_bytes(old)
    disk = tmp_path / "disk"
    disk.mkdir()
    # room for the old output and a third of a new one (tmpfs counts whole pages, one or more per file)
    pages = sum(1 + f.stat().st_size // 4096 for f in ([old] if old.is_file() else old.rglob("*")) if f.is_file())
    kib = 4 * pages + size // 3 // 1024 + 8
    target = str(disk / name)
    script = DRIVER.format(
        tests=str(Path(__file__).parent), old=str(old), disk=str(disk), args=command(outputs, target), name=name
    )
    shell = f'mount -t tmpfs -o size={kib}k tmpfs {disk} && exec {sys.executable} -c "$0"'
    done = subprocess.run(
        [*_unshare(), "sh", "-c", shell, script],
        cwd=outputs["work"],
        env=cli_env(outputs["cache"]),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    lines = found["stderr"].strip().splitlines()
    assert found["code"] == 2, found["stderr"][-3000:]
    assert len(lines) == 1, found["stderr"][-3000:]
    assert "no space left on device" in lines[0] and target in lines[0], lines[0]
    assert "needs" in lines[0] and "free" in lines[0], lines[0]
    assert found["same"], "the old output changed"
    assert found["litter"] == []
    assert litter(outputs["work"]) == []
