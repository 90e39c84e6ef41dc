"""Ctrl-C at random instants through the real CLI: exit 130 with one line, no native abort, nothing half-written,
and the rerun's results equal an uninterrupted run's.

Each verb runs once uninterrupted on a small SciFact cut (its wall time ``T`` and its result are the reference);
then SIGINT is sent at instants drawn uniformly from the run (seeded), the process must end 130 with the one line of
``embedkit.cli.interrupts``, no litter is left, and the same command run again gives the reference result.
``make test`` sends 2 instants a verb; the ``slow`` sweep sends 20 a verb.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cli_env, sweep_label, sweep_random, write_scifact_slice
from test_bad_input import litter

LINE = "embedkit: error: interrupted; "


def _run(args: list[str], cwd: Path, cache: Path, interrupt_at: float | None = None) -> tuple[int, str, str, float]:
    start = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "embedkit.cli", *args],
        cwd=cwd,
        env=cli_env(cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if interrupt_at is not None:
        try:
            process.wait(timeout=interrupt_at)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=300)
    return process.returncode, out, err, time.monotonic() - start


def _remove(work: Path, names: list[str]) -> None:
    for name in names:
        path = work / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def _metrics(folder: Path) -> dict:
    (report,) = folder.glob("*/report.json")
    return json.loads(report.read_text())["metrics"]


@pytest.fixture(scope="module")
def verbs(tmp_path_factory, scifact) -> dict:
    """The three verbs on one encoded and indexed cut: their commands and result readers (``_verb`` times each)."""
    work = tmp_path_factory.mktemp("interrupts")
    cut = write_scifact_slice(work / "cut", scifact, {"test": 10}, 60, 100)
    cache = work / "cache"
    setup = ["index", "-e", "emb", "-o", "idx"]
    code, _, err, _ = _run(["encode", "-d", str(cut), "-o", "emb"], work, cache)
    assert code == 0, err
    code, _, err, _ = _run(setup, work, cache)
    assert code == 0, err
    commands = {
        "evaluate": (["evaluate", "-d", str(cut), "-o", "report", "--overwrite"], lambda: _metrics(work / "report")),
        "mine": (
            ["mine", "-d", str(cut), "--split", "test", "-o", "mined.jsonl", "--overwrite"],
            lambda: (work / "mined.jsonl").read_text(),
        ),
        "search": (
            ["search", "-i", "idx", "-d", str(cut), "--split", "test", "-o", "run.trec", "-k", "10", "--overwrite"],
            lambda: (work / "run.trec").read_text(),
        ),
    }
    clear = {"evaluate": ["report"], "mine": ["mined.jsonl", "mined.jsonl.meta.json"], "search": ["run.trec"]}
    return {"work": work, "cache": cache, "commands": commands, "clear": clear, "verbs": {}}


def _verb(verbs: dict, verb: str) -> dict:
    """A verb's command, result reader and uninterrupted time and result, measured on its first use (so `make test`
    never times ``mine``, whose instants run in the slow tier)."""
    if verb not in verbs["verbs"]:
        work, cache = verbs["work"], verbs["cache"]
        args, result = verbs["commands"][verb]
        for _ in range(2):  # a warm run first (caches filled), then the timed reference run
            code, _, err, seconds = _run(args, work, cache)
            assert code == 0, err
        verbs["verbs"][verb] = {
            "args": args,
            "result": result,
            "reference": result(),
            "seconds": seconds,
            "clear": lambda names=verbs["clear"][verb]: (
                [shutil.rmtree(work / n, ignore_errors=True) for n in names]
                + [(work / n).unlink(missing_ok=True) for n in names]
            ),
        }
    return verbs["verbs"][verb]


def _sweep(verbs: dict, verb: str, instants: int) -> None:
    """``instants`` interrupts that landed while the work ran (one that lands once the result is written, as the
    process shuts down, is ignored by design: exit 0 with the whole result; another instant is drawn)."""
    work, cache, spec = verbs["work"], verbs["cache"], _verb(verbs, verb)
    draw = sweep_random(f"ctrl-c-{verb}-{instants}")
    landed = 0
    for _ in range(3 * instants):
        if landed == instants:
            break
        at = draw.uniform(0.3, 0.9 * spec["seconds"])
        spec["clear"]()  # so that a result found after the run is this run's
        code, _, err, _ = _run(spec["args"], work, cache, interrupt_at=at)
        if code == 0:
            assert spec["result"]() == spec["reference"], f"{verb}: a run interrupted as it ended differs"
            continue
        landed += 1
        lines = err.strip().splitlines()
        assert code == 130, f"{verb} ({sweep_label()}) at {at:.2f}s: exit {code}\n{err[-3000:]}"
        assert len(lines) == 1 and lines[0].startswith(LINE), f"{verb} ({sweep_label()}) at {at:.2f}s:\n{err[-3000:]}"
        assert "terminate called" not in err and "Traceback" not in err
        assert litter(work) == [], f"{verb} ({sweep_label()}) at {at:.2f}s left {litter(work)}"
        code, _, err, _ = _run(spec["args"], work, cache)
        assert code == 0, f"{verb} ({sweep_label()}): the rerun after an interrupt at {at:.2f}s failed:\n{err[-3000:]}"
        assert spec["result"]() == spec["reference"], f"{verb} ({sweep_label()}): the rerun after {at:.2f}s differs"
    assert landed == instants, f"{verb}: only {landed} of {instants} interrupts landed before the work ended"


@pytest.mark.parametrize(
    "verb",  # mine's instants run with make test-slow (its every-step sweep too): make test stays under 25 minutes
    ["evaluate", pytest.param("mine", marks=pytest.mark.slow), "search"],
)
def test_ctrl_c_at_random_instants(verbs, verb):
    _sweep(verbs, verb, instants=2)


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["evaluate", "mine", "search"])
def test_ctrl_c_sweep(verbs, verb):
    _sweep(verbs, verb, instants=20)


def test_second_ctrl_c_exits_at_once(verbs):
    """A second SIGINT while the first unwinds ends the process at once, still with exit 130 and one line."""
    work, cache, spec = verbs["work"], verbs["cache"], _verb(verbs, "evaluate")
    process = subprocess.Popen(
        [sys.executable, "-m", "embedkit.cli", *spec["args"]],
        cwd=work,
        env=cli_env(cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(spec["seconds"] / 2)
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert err.count("embedkit: error: interrupted") == 1 and "Traceback" not in err, err
    assert litter(work) == []


def test_an_error_raised_while_ctrl_c_unwinds_is_still_the_interrupt(tmp_path, monkeypatch):
    """A context manager whose exit fails during the unwinding (transformers' model loading, under the sweep) raises
    another exception with the ``KeyboardInterrupt`` as its context: still one line and exit 130, no traceback."""
    from conftest import embedkit_here

    import embedkit.index.registry

    def interrupted_load(*args, **kwargs):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("trying to pop from empty mode stack") from None

    monkeypatch.setattr(embedkit.index.registry, "open_index", interrupted_load)
    (tmp_path / "q.jsonl").write_text('{"_id": "q", "text": "x"}\n')
    (tmp_path / "idx").mkdir()
    result = embedkit_here("search", "-i", tmp_path / "idx", "--queries", tmp_path / "q.jsonl", "-o", tmp_path / "r")
    assert result.returncode == 130 and result.stderr.strip().startswith(LINE), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_an_interrupt_inside_a_finalizer_is_raised_after_it():
    """Python drops an exception raised in ``__del__``: a Ctrl-C landing there must wait and be raised after it
    (``test_second_ctrl_c_exits_at_once`` lost one this way, exiting 0 with the whole result)."""
    import signal as signals

    from embedkit.cli.interrupts import CtrlC

    handler, before = CtrlC(), signals.getsignal(signals.SIGALRM)

    class Finalised:
        def __del__(self):
            handler.raise_when_safe(signals.SIGINT, sys._getframe())

    try:
        with pytest.raises(KeyboardInterrupt):
            Finalised()  # collected at once: the interrupt lands in its __del__
            time.sleep(2)  # and is raised here, once the finalizer is over
    finally:
        signals.setitimer(signals.ITIMER_REAL, 0)
        signals.signal(signals.SIGALRM, before)
