"""The ``embedkit`` command: one module per verb, each a thin wrapper over a library call.

Each verb checks its arguments before it imports torch, FAISS or sentence-transformers, so a bad flag costs a
fraction of a second; every numeric option is finite (``finite_numbers``). A user error (bad input, a bad flag, an
output that would lose data, a full disk, a folder it may not write) prints one line and exits 2; Ctrl-C prints one
line saying what was kept and exits 130 (``interrupts``); anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import errno
import os
import signal
import sys

import typer

try:  # typer 0.29 and later carry their own copy of click
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older typer runs on click itself
    from click import exceptions as click_errors

from embedkit.cli.interrupts import INTERRUPTED, CtrlC, exit_now, kept_line
from embedkit.cli.options import finite_numbers
from embedkit.errors import EmbedkitError

app = typer.Typer(
    name="embedkit",
    help="Dense retrieval: encode, index, search and evaluate on BEIR.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
# OS errors that are the user's environment, not a bug: one line naming the path.
ENVIRONMENT_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS}


def _register() -> None:
    if app.registered_commands:  # main() run again in one process (a test, a notebook): already registered
        return
    from embedkit.cli import (
        cache,
        compare,
        distill_static,
        encode,
        evaluate,
        index,
        merge,
        mine,
        pretrain,
        reproduce,
        rerank,
        rescore,
        search,
        serve,
        train,
    )

    stages = (encode, index, search, rerank, evaluate, serve)
    for module in (*stages, mine, rescore, train, merge, pretrain, distill_static, compare, reproduce, cache):
        module.register(app)
    for group in [app, *(info.typer_instance for info in app.registered_groups)]:
        for command in group.registered_commands:
            command.callback = finite_numbers(command.callback)


def _fail(message: str, code: int) -> None:
    print(f"embedkit: error: {' '.join(message.split())}", file=sys.stderr)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run a verb and turn every user error into one line on stderr.

    Run as the program (``argv`` None) it owns the process: it installs the Ctrl-C handler and ends an interrupted
    run with ``os._exit``; called with ``argv`` (a test, a notebook) it leaves the host's signal handling alone.
    """
    program = argv is None
    if program:
        CtrlC().install()
    try:
        _run(argv)
    except SystemExit as done:
        if program and done.code == INTERRUPTED:
            exit_now(INTERRUPTED)
        if program:  # the work is done: a Ctrl-C during interpreter shutdown must not kill it with a bare SIGINT
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise


def _raised_by_an_interrupt(err: BaseException) -> bool:
    """Whether ``err`` was raised while a Ctrl-C unwound the stack: a context manager's exit that fails on the way
    out (transformers' model-loading contexts: "trying to pop from empty mode stack") replaces the
    ``KeyboardInterrupt``, which stays in its ``__context__`` chain."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, KeyboardInterrupt):
            return True
        seen.add(id(err))
        err = err.__context__
    return False


QUIET_LIBRARIES = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
}


def _run(argv: list[str] | None) -> None:
    # A command line shows embedkit's own lines: the libraries' bars and chatter are off unless the user's
    # environment says otherwise (set before they are imported; the library itself never changes them)
    for name, value in QUIET_LIBRARIES.items():
        os.environ.setdefault(name, value)
    try:
        _register()
        code = app(args=argv, prog_name="embedkit", standalone_mode=False)
    except EmbedkitError as err:
        _fail(str(err), getattr(err, "exit_code", 2))
    except KeyboardInterrupt:
        _fail(kept_line(), INTERRUPTED)
    except OSError as err:
        if err.errno not in ENVIRONMENT_ERRORS:
            raise
        where = f"{err.filename}: " if err.filename else ""
        _fail(f"{where}{err.strerror}", 2)
    except click_errors.NoArgsIsHelpError as err:
        print(err.format_message(), file=sys.stderr)
        sys.exit(2)
    except click_errors.UsageError as err:
        command = err.ctx.command_path if err.ctx is not None else "embedkit"
        _fail(f"{err.format_message()} (see '{command} --help')", 2)
    except typer.Abort:
        _fail(kept_line(), INTERRUPTED)
    except click_errors.ClickException as err:
        _fail(err.format_message(), err.exit_code)
    except Exception as err:
        if not _raised_by_an_interrupt(err):
            raise
        _fail(kept_line(), INTERRUPTED)
    if code == INTERRUPTED:  # typer turns KeyboardInterrupt into a silent exit 130
        _fail(kept_line(), INTERRUPTED)
    sys.exit(code if isinstance(code, int) else 0)
