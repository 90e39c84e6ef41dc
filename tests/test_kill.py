"""A real SIGKILL at every step of replacing an output: afterwards the old output or the new one is whole, never a
mix, and a rerun cleans up.

Each command is traced once with strace to list its renames and deletions; then it is run again for each chosen
step with strace injecting SIGKILL on entry to that very syscall (``-e inject=SYSCALL:signal=SIGKILL:when=N``), so
the kill lands exactly before it runs.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli_env

from embedkit.report.markdown import render_markdown
from embedkit.storage import is_litter

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is needed to inject the kill")
CALLS = ("rename", "renameat", "renameat2", "unlink", "unlinkat", "rmdir")
LINE = re.compile(r"^(?:(\d+)\s+)?(\w+)\((.*)\)\s+=\s+(-?\d+)")


def _cli(args: list[str], cwd: Path, cache: Path, strace: list[str] | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "embedkit.cli", *args]
    if strace is not None:
        command = ["strace", "-qq", *strace, *command]  # the main thread: where embedkit renames and deletes
    return subprocess.run(command, cwd=cwd, env=cli_env(cache), capture_output=True, text=True, timeout=600)


def kill_points(args: list[str], cwd: Path, cache: Path, target: str) -> list[tuple[str, int, str]]:
    """``(syscall, n, arguments)``: every rename touching ``target`` and the first deletions after its last one,
    where ``n`` counts that syscall from the start of the run (the number strace's ``when=`` takes). The traced run
    itself completes."""
    log = cwd / "strace.log"
    result = _cli(args, cwd, cache, ["-e", f"trace={','.join(CALLS)}", "-o", str(log)])
    assert result.returncode == 0, result.stderr
    calls = [(m[2], m[3]) for line in log.read_text().splitlines() if (m := LINE.match(line))]
    log.unlink()
    seen: dict[str, int] = {}
    numbered = []
    for name, arguments in calls:
        seen[name] = seen.get(name, 0) + 1
        numbered.append((name, seen[name], arguments))
    renames = [
        i for i, (name, _, arguments) in enumerate(numbered) if name.startswith("rename") and target in arguments
    ]
    assert renames, f"no rename of {target} in {calls}"
    after = [call for call in numbered[renames[-1] + 1 :] if call[0] in ("unlinkat", "rmdir", "unlink")][:3]
    return [numbered[i] for i in renames] + after


def key_points(points: list[tuple[str, int, str]], every: bool) -> list[tuple[str, int, str]]:
    """All points, or the two that matter most: the swap itself, and the first deletion after it (the old folder is
    then in a temporary one that a rerun must clean); ``make test-slow`` runs them all."""
    if every:
        return points
    swap = next(i for i, point in enumerate(points) if point[0] == "renameat2" or "EXCHANGE" in point[2])
    return points[swap : swap + 2]


EVERY = [False, pytest.param(True, marks=pytest.mark.slow)]


def killed(args: list[str], cwd: Path, cache: Path, point: tuple[str, int, str]) -> None:
    name, n, _ = point
    result = _cli(
        args, cwd, cache, ["-o", "/dev/null", "-e", f"trace={name}", "-e", f"inject={name}:signal=SIGKILL:when={n}"]
    )
    assert result.returncode != 0, f"the kill at {point} never landed: {result.stdout}"


def content(folder: Path) -> dict[str, str] | None:
    if not folder.is_dir():
        return None
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def litter(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*") if is_litter(p.name) or p.name.endswith((".tmp", ".partial")))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("kill-cache")


@pytest.mark.parametrize("every", EVERY, ids=["key-steps", "every-step"])
def test_index_killed_while_replacing_an_index(scifact_embeddings, tmp_path, cache, every):
    work = tmp_path / "work"
    work.mkdir()
    emb = str(scifact_embeddings.path)
    assert _cli(["index", "-e", emb, "-o", "reference"], work, cache).returncode == 0
    new_args = ["index", "-e", emb, "-o", "idx", "--factory", "SQ8", "--overwrite"]
    assert _cli([*new_args[:4], "reference-new", *new_args[5:]], work, cache).returncode == 0
    old, new = content(work / "reference"), content(work / "reference-new")
    shutil.copytree(work / "reference", work / "idx")
    points = kill_points(new_args, work, cache, "idx")
    assert len(points) >= 4 and any(name == "renameat2" or "EXCHANGE" in what for name, _, what in points)
    for point in key_points(points, every):
        shutil.rmtree(work / "idx")
        shutil.copytree(work / "reference", work / "idx")
        killed(new_args, work, cache, point)
        assert content(work / "idx") in (old, new), point  # whole, old or new
        rerun = _cli(new_args, work, cache)
        assert rerun.returncode == 0, rerun.stderr
        assert content(work / "idx") == new and litter(work) == [], point


def _report_is_whole(folder: Path) -> bool:
    """Every file of a report folder comes from one run: the Markdown is the one its report.json renders."""
    report = json.loads((folder / "report.json").read_text())
    return (folder / "report.md").read_text() == render_markdown(report) and (folder / "run.trec").stat().st_size > 0


@pytest.mark.parametrize("every", EVERY, ids=["key-steps", "every-step"])
def test_evaluate_killed_while_writing_its_report(scifact_subset, tmp_path, cache, every):
    work = tmp_path / "work"
    work.mkdir()
    args = ["evaluate", "-d", str(scifact_subset), "-o", "runs", "--retriever", "bm25"]
    first = _cli(args, work, cache)
    assert first.returncode == 0, first.stderr
    (folder,) = (work / "runs").iterdir()
    points = kill_points(args, work, cache, folder.name)
    assert len(points) >= 6
    for point in key_points(points, every):
        before = content(folder)
        killed(args, work, cache, point)
        after = content(folder)
        assert after == before or (after is not None and _report_is_whole(folder)), point
        assert _cli(args, work, cache).returncode == 0
        assert (
            _report_is_whole(folder)
            and litter(work) == []
            and [p.name for p in (work / "runs").iterdir()] == [folder.name]
        ), point


@pytest.mark.parametrize("every", EVERY, ids=["key-steps", "every-step"])
def test_train_killed_while_committing_its_model(tiny_bert, scifact_subset, tmp_path, cache, every):
    """A run replaces an earlier model (--overwrite); killed as it swaps it in (or, in the slow sweep, at each step),
    OUTPUT holds one whole model, and running the same command again finishes the job and leaves nothing behind."""
    work = tmp_path / "work"
    work.mkdir()
    base = [
        "train",
        "-m",
        str(tiny_bert),
        "--pooling",
        "mean",
        "-d",
        str(scifact_subset),
        "--train-split",
        "test",
        "--batch-size",
        "4",
        "--max-length",
        "32",
        "-o",
        "model",
    ]
    assert _cli([*base, "--max-steps", "1"], work, cache).returncode == 0
    shutil.copytree(work / "model", tmp_path / "old")
    old = content(tmp_path / "old")
    args = [*base, "--max-steps", "2", "--overwrite"]
    traced = kill_points(args, work, cache, "model")
    exchange = next(i for i, point in enumerate(traced) if point[0] == "renameat2")
    # at the swap (the index and report tests also kill just after it); the slow sweep: as it starts, and every
    # step from the swap on
    points = [traced[0], *traced[exchange:]] if every else [traced[exchange]]
    for point in points:
        shutil.rmtree(work / "model")
        shutil.copytree(tmp_path / "old", work / "model")
        killed(args, work, cache, point)
        record = json.loads((work / "model" / "embedkit_training.json").read_text())
        assert content(work / "model") == old or record["config"]["max_steps"] == 2, point
        rerun = _cli(args, work, cache)
        assert rerun.returncode == 0, rerun.stderr
        record = json.loads((work / "model" / "embedkit_training.json").read_text())
        assert record["config"]["max_steps"] == 2 and record["steps"] == 2, point
        assert litter(work) == [], point
