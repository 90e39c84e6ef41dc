"""User-facing errors: one line that names the file, line and field, never a traceback."""

from __future__ import annotations

from pathlib import Path


class EmbedkitError(Exception):
    """An error caused by the user's input or environment, reported as one line by the CLI (exit status 2)."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.field = field
        where = ""
        if self.path is not None:
            where = self.path + (f":{line}" if line is not None else "") + ": "
        what = f"{'option' if field.startswith('-') else 'field'} '{field}': " if field else ""
        super().__init__(f"{where}{what}{message}")


class Interrupted(EmbedkitError):
    """The user stopped a command (Ctrl-C); the message says what was kept and how to go on."""

    exit_code = 130
