"""A warm ``embedkit`` for tests that run the CLI hundreds of times: imports once, forks a child per command.

Each child runs the real entry point as a program (``embedkit.cli.main()`` with ``sys.argv``: its Ctrl-C handler,
its exit codes) with stdout and stderr in files, so a native crash or a hang ends that child only: the parent reports
its exit status or signal and kills it after ``timeout``. Requests and answers are JSON lines on stdin and stdout:

- ``{"op": "run", "argv": [...], "cwd": ..., "env": {...}, "timeout": s}`` (``env``: the child's whole
  environment, optional) → ``{"code", "signal", "timed_out", "stdout", "stderr",
  "seconds"}`` once the child ends;
- ``{"op": "start", ...}`` → ``{"pid", "out", "err"}`` at once; ``{"op": "wait", "pid", "out", "err", "timeout"}``
  → the same answer as ``run`` (the test sends its own signals in between); ``{"op": "poll", ...}`` → that answer
  if the child has ended, else ``{"running": true}``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import faiss  # noqa: F401  (imported once here, so each child starts warm)
import sentence_transformers  # noqa: F401
import torch  # noqa: F401

import embedkit.cli


def _child(argv: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    os.chdir(cwd)
    if env:  # the whole environment the command would have been started with
        os.environ.clear()
        os.environ.update(env)
    if "HF_DATASETS_CACHE" in env:  # read by datasets when imported, which the zygote did before this child's env
        import datasets.config

        cache = Path(env["HF_DATASETS_CACHE"]).expanduser()
        datasets.config.HF_DATASETS_CACHE = cache
        datasets.config.DOWNLOADED_DATASETS_PATH = cache / datasets.config.DOWNLOADED_DATASETS_DIR
        datasets.config.EXTRACTED_DATASETS_PATH = cache / datasets.config.EXTRACTED_DATASETS_DIR
    for fd, path in ((1, out), (2, err)):
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(handle, fd)
        os.close(handle)
    sys.argv = ["embedkit", *argv]
    code = 1
    try:
        embedkit.cli.main()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException:  # a bug: its traceback on stderr, as the interpreter would print it
        import traceback

        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _start(request: dict) -> dict:
    folder = tempfile.mkdtemp(prefix="zygote-")
    out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _child(request["argv"], request["cwd"], request.get("env", {}), out, err)
    return {"pid": pid, "out": out, "err": err, "started": time.monotonic()}


def _wait(started: dict, timeout: float, kill: bool = True) -> dict:
    """The child's end (killed after ``timeout`` unless ``kill`` is false: then ``{"running": true}``)."""
    deadline = time.monotonic() + timeout
    timed_out = False
    while True:
        pid, status = os.waitpid(started["pid"], os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline and not kill:
            return {"running": True}
        if time.monotonic() > deadline:
            timed_out = True
            os.kill(started["pid"], signal.SIGKILL)
            _, status = os.waitpid(started["pid"], 0)
            break
        time.sleep(0.02)
    with open(started["out"], errors="replace") as out, open(started["err"], errors="replace") as err:
        found = {"stdout": out.read(), "stderr": err.read()}
    shutil.rmtree(os.path.dirname(started["out"]), ignore_errors=True)  # the child's output files, read
    return {
        **found,
        "code": os.waitstatus_to_exitcode(status),
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "timed_out": timed_out,
        "seconds": time.monotonic() - started["started"],
    }


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the test signals children, never the zygote
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "run":
            answer = _wait(_start(request), request["timeout"])
        elif request["op"] == "start":
            answer = _start(request)
        elif request["op"] == "poll":
            answer = _wait(request, 0, kill=False)
        else:
            answer = _wait(request, request["timeout"])
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
