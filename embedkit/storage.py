"""Writing and reading files without ever leaving a half-written one: atomic writes, JSON, ``.npy``, checksums.

A file is written beside its target and renamed over it (``atomic_open``), so a kill leaves the old file or the new
one; new files honour the umask as plain ``open`` does (``mkstemp`` would give 0600). Folders, and which existing
outputs may be replaced at all, are ``embedkit.outputs``'s.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from embedkit.errors import EmbedkitError

LOCK_SUFFIX = ".embedkit-lock"
NEW_MARK = ".embedkit-new."
OLD_MARK = ".embedkit-old."


def token() -> str:
    return secrets.token_hex(4)


def fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def is_litter(name: str) -> bool:
    """Names embedkit leaves only while it writes (temporary files and folders, locks)."""
    return name.startswith(".") and (name.endswith((".tmp", LOCK_SUFFIX)) or NEW_MARK in name or OLD_MARK in name)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Open a new file beside ``path``; rename it over ``path`` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{token()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # 0o666 & ~umask, as open() gives
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": "\n"})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: str | Path, data: Any) -> None:
    with atomic_open(path) as handle:
        json.dump(data, handle, indent=2, ensure_ascii=False)
        handle.write("\n")


def write_text(path: str | Path, text: str) -> None:
    with atomic_open(path) as handle:
        handle.write(text)


def write_lines(path: str | Path, lines: Iterable[str]) -> None:
    with atomic_open(path) as handle:
        for line in lines:
            handle.write(line + "\n")


def read_lines(path: str | Path) -> list[str]:
    """The lines of a file embedkit wrote with ``write_lines`` (split on newline only, as written)."""
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def read_json(path: str | Path, what: str = "file") -> Any:
    """A JSON file's content; a missing, unreadable or malformed file is one ``EmbedkitError`` naming it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise EmbedkitError(f"no such {what}", path=path) from None
    except UnicodeDecodeError as err:
        raise EmbedkitError(f"not UTF-8 text (byte {err.start + 1})", path=path) from None
    except OSError as err:
        raise EmbedkitError(f"cannot read: {err.strerror}", path=path) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise EmbedkitError(f"malformed JSON at column {err.colno}: {err.msg}", path=path, line=err.lineno) from None
    except RecursionError:
        raise EmbedkitError("JSON nested too deeply", path=path) from None


def save_npy(path: str | Path, array: np.ndarray) -> None:
    with atomic_open(path, "wb") as handle:
        np.save(handle, array, allow_pickle=False)


def load_npy(path: str | Path, mmap: bool = False) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None)
    except FileNotFoundError:
        raise EmbedkitError("missing", path=path) from None
    except (ValueError, EOFError, OSError) as err:
        raise EmbedkitError(f"not a readable .npy array ({str(err).splitlines()[0]})", path=path) from None


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_json(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
