"""Ctrl-C for every verb: stop at a safe point, say in one line what was kept, exit 130, and never abort natively.

The first SIGINT raises ``KeyboardInterrupt`` in the main thread, as Python's own handler does, so every ``finally``
and ``except BaseException`` on the way out runs: temporary files and folders are removed, the old outputs stay
whole. The line then names what this process had put in place (complete files renamed over their targets, folders
swapped in), which a rerun reuses. The process ends with ``os._exit``: interpreter shutdown would destroy native
threads still running (tokenizers, OpenMP, the JVM), and a C++ thread destroyed while joinable aborts the process
("terminate called without an active exception"). A second Ctrl-C exits at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from types import FrameType

from embedkit.storage import kept_so_far

INTERRUPTED = 130
IMPORT_FRAMES = "<frozen importlib._bootstrap"  # the file name of the frames that run an import
RETRY_SECONDS = 0.02


def unsafe_to_raise(frame: FrameType | None) -> bool:
    """Whether the main thread is inside an import (a module's body, or a native extension's initialisation) or a
    finalizer (``__del__``: Python prints an exception raised there and drops it, and the Ctrl-C would be lost)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(IMPORT_FRAMES) or frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


class CtrlC:
    """The SIGINT handler of the embedkit command (installed only when it runs as a program, never by the library).

    An interrupt that lands during an import is raised once the import is over (a timer checks every
    ``RETRY_SECONDS``): a native library initialising (torch) calls back into Python, and a ``KeyboardInterrupt``
    raised there cannot pass through its C++ frames, which abort the process instead. One that lands in a
    finalizer waits the same way, since Python drops an exception raised in ``__del__``.
    """

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count > 1:
            os.write(2, b"embedkit: error: interrupted again; stopped at once (temporary files may remain)\n")
            os._exit(INTERRUPTED)
        self.raise_when_safe(signal.SIGINT, frame)

    def raise_when_safe(self, signum: int, frame: FrameType | None) -> None:
        if unsafe_to_raise(frame):
            signal.signal(signal.SIGALRM, self.raise_when_safe)
            signal.setitimer(signal.ITIMER_REAL, RETRY_SECONDS)
            return
        raise KeyboardInterrupt

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self)


def kept_line() -> str:
    """``interrupted; ...``: what this process put in place that is still there, or that nothing was written."""
    kept = kept_so_far()
    if not kept:
        return "interrupted; nothing was written (the outputs are as they were)"
    parts = [
        f"{count} complete file{'s' if count != 1 else ''} in {folder}" if count else f"the folder {folder}"
        for folder, count in kept.items()
    ]
    return f"interrupted; kept {'; '.join(parts)} (rerun the same command to reuse them)"


def exit_now(code: int) -> None:
    """Flush what was printed and end the process without interpreter shutdown (see the module docstring)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
