"""Every numeric option of encode, index, search, evaluate, mine, train, merge, pretrain and serve, given NaN, ±inf, 0,
negative and huge values through the real entry point: none exits 0 with a NaN in an output, none crashes natively,
none hangs.

The options are read from the verbs' signatures (so a new option is covered the day it is added). Each run is a
child forked from a warm process (``cli_zygote.py``), bounded in time; a refusal must be exit 2 with one line and no
traceback. Each option gets ``SAMPLED`` of the fixed value classes, drawn with the run's seed (every class over a few
runs; ``EMBEDKIT_TEST_SEED`` replays a run), then values ``hypothesis`` draws.
"""

from __future__ import annotations

import inspect
import os
import re
import signal
import socket
import time
from pathlib import Path

import httpx
import pytest
from conftest import CliZygote, cli_env, sweep_label, sweep_random, write_scifact_slice
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import embedkit.cli as cli
from embedkit.cli.options import _flag_of, _numeric
from embedkit.models.reference import default_model_path

VERBS = ("encode", "index", "search", "evaluate", "mine", "train", "merge", "pretrain", "serve")
SPECIAL = ("nan", "inf", "-inf", "0", "-1", "4611686018427387904", "1e300", str(10**30))
NAN = re.compile(r"\b(NaN|-?Infinity|nan|-?inf)\b")
JSON_NAN = re.compile(r"[:\[,]\s*-?(NaN|Infinity)\b")  # a value, not a key (a vocabulary holds the word "nan")
TIMEOUT = 180.0
SAMPLED = 3  # of the SPECIAL classes, per option and run


def numeric_options(verb: str) -> list[str]:
    cli._register()
    verbs = [(info.name, info.callback) for info in cli.app.registered_commands]
    verbs += [(info.typer_instance.info.name, info.typer_instance.registered_callback.callback)
              for info in cli.app.registered_groups if info.typer_instance.registered_callback]  # fmt: skip
    for name, callback in verbs:
        command = inspect.unwrap(callback)
        if (name or command.__name__) == verb:
            signature = inspect.signature(command, eval_str=True)
            return [_flag_of(p) for p in signature.parameters.values() if _numeric(p.annotation)]
    raise AssertionError(f"no verb {verb}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def world(tmp_path_factory, scifact):
    """A small cut, its embeddings and index, a warm cache, and the zygote."""
    work = tmp_path_factory.mktemp("numeric")
    cut = write_scifact_slice(work / "cut", scifact, {"test": 10}, 60, 100)
    cache = work / "cache"
    zygote = CliZygote({**cli_env(cache), "OMP_NUM_THREADS": "1"})
    for args in (["encode", "-d", str(cut), "-o", "emb"], ["index", "-e", "emb", "-o", "idx"]):
        done = zygote.ask({"op": "run", "argv": args, "cwd": str(work), "timeout": TIMEOUT})
        assert done["code"] == 0, done["stderr"]
    yield {"work": work, "cut": cut, "zygote": zygote, "runs": 0}
    zygote.close()


def base(verb: str, world: dict, out: str) -> list[str]:
    cut, work = str(world["cut"]), world["work"]
    return {
        "encode": ["encode", "-d", cut, "-o", out],
        "index": ["index", "-e", str(work / "emb"), "-o", out],
        "search": ["search", "-i", str(work / "idx"), "-d", cut, "--split", "test", "-o", out + ".trec"],
        "evaluate": ["evaluate", "-d", cut, "-o", out],
        "mine": ["mine", "-d", cut, "--split", "test", "-o", out + ".jsonl"],
        "train": [
            *("train", "-d", cut, "--train-split", "test", "-o", out),
            *("--max-steps", "1", "--batch-size", "4", "--max-length", "32"),
        ],
        "pretrain": [
            *("pretrain", "-d", cut, "-o", out, "--max-steps", "1", "--batch-size", "4", "--max-length", "32"),
        ],
        "merge": [
            *("merge", "--base", str(default_model_path()), "--tuned", str(default_model_path()), "-o", out),
            *("--alpha", "auto", "--dev-dataset", cut, "--dev-split", "test"),
        ],
        "serve": ["serve", "-i", str(work / "idx"), "-d", cut],
    }[verb]


def _with(args: list[str], flag: str, value: str) -> list[str]:
    """``args`` with ``flag`` set to ``value`` (replacing the base command's own value of it)."""
    if flag in args:
        at = args.index(flag)
        return [*args[:at], *args[at + 2 :], flag, value]
    return [*args, flag, value]


def _nan_in_outputs(folder: Path, stem: str) -> list[str]:
    """Text outputs of the run (``stem``, ``stem.*`` or files under the folder ``stem``) holding NaN or infinity."""
    paths = [p for p in folder.glob(stem + "*") if p.is_file()] + sorted((folder / stem).rglob("*"))
    texts = [p for p in paths if p.is_file() and p.suffix in (".json", ".jsonl", ".trec", ".md", ".tsv")]
    pattern = {".json": JSON_NAN, ".jsonl": JSON_NAN}
    return [
        str(p)
        for p in texts
        if p.stat().st_size < 5e7 and pattern.get(p.suffix, NAN).search(p.read_text(errors="replace"))
    ]


def _judge(verb: str, flag: str, value: str, done: dict, out: str, world: dict) -> None:
    what = f"{verb} {flag} {value} ({sweep_label()})"
    assert not done["timed_out"], f"{what}: still running after {TIMEOUT} s (a hang)\n{done['stderr'][-2000:]}"
    assert done["signal"] is None and done["code"] not in (134, 139), f"{what}: native crash {done}"
    assert "Traceback" not in done["stderr"], f"{what}: traceback\n{done['stderr'][-3000:]}"
    if done["code"] == 0:
        nan = _nan_in_outputs(world["work"], out)
        assert not nan, f"{what}: exit 0 with NaN or infinity in {nan}"
    else:
        lines = done["stderr"].strip().splitlines()
        assert done["code"] in (2, 130) and len(lines) == 1, f"{what}: exit {done['code']}\n{done['stderr'][-3000:]}"


def _serve(world: dict, flag: str, value: str) -> dict:
    """serve with the option: refused at once, or it starts, answers /search and stops at the first Ctrl-C."""
    port = free_port()
    args = _with([*base("serve", world, ""), "--port", str(port)], flag, value)
    zygote = world["zygote"]
    started = zygote.ask({"op": "start", "argv": args, "cwd": str(world["work"])})
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        ended = zygote.ask({**started, "op": "poll"})
        if not ended.get("running"):
            return ended
        if flag == "--port" and time.monotonic() > deadline - 80:  # its port is not ours to probe: up 10 s is up
            break
        if flag != "--port":
            try:
                reply = httpx.post(f"http://127.0.0.1:{port}/search", json={"queries": ["alpha"], "k": 3}, timeout=30)
            except httpx.TransportError:
                time.sleep(0.3)
                continue
            assert reply.status_code == 200 and not NAN.search(reply.text), f"serve {flag} {value}: {reply.text}"
            break
    else:
        zygote.ask({**started, "op": "wait", "timeout": 0})
        pytest.fail(f"serve {flag} {value}: never answered /search in 90 s")
    os.kill(started["pid"], signal.SIGINT)
    stopped = zygote.ask({**started, "op": "wait", "timeout": 30})
    assert not stopped["timed_out"], f"serve {flag} {value}: the first Ctrl-C did not stop it"
    assert stopped["code"] in (0, 130), f"serve {flag} {value}: {stopped}"
    return {**stopped, "code": 0, "stderr": ""}


def check(verb: str, flag: str, value: str, world: dict) -> None:
    world["runs"] += 1
    out = f"out-{world['runs']}"
    if verb == "serve":
        done = _serve(world, flag, value)
    else:
        args = _with(base(verb, world, out), flag, value)
        done = world["zygote"].ask({"op": "run", "argv": args, "cwd": str(world["work"]), "timeout": TIMEOUT})
    _judge(verb, flag, value, done, out, world)


# the verbs whose every value trains a model (minutes each) sweep with `make test-slow`, the rest with `make test`
TRAINING = ("merge", "pretrain", "train")


def _split(verbs: tuple[str, ...], slow: tuple[str, ...]) -> list:
    return [pytest.param(verb, marks=pytest.mark.slow) if verb in slow else verb for verb in verbs]


@pytest.mark.parametrize("verb", _split(VERBS, TRAINING))
def test_every_numeric_option_with_extreme_values(world, verb):
    draw = sweep_random(f"numeric-{verb}")
    for flag in numeric_options(verb):
        for value in draw.sample(SPECIAL, SAMPLED):
            check(verb, flag, value, world)


@pytest.mark.parametrize("verb", _split(VERBS, TRAINING))
def test_drawn_values(world, verb):
    options = numeric_options(verb)
    values = st.one_of(
        st.integers(min_value=-(2**70), max_value=2**70).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
    )

    @settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(flag=st.sampled_from(options), value=values)
    def run(flag: str, value: str) -> None:
        check(verb, flag, value, world)

    run()
