"""Writing and reading files without ever leaving a half-written one: atomic writes, JSON, ``.npy``, checksums.

A file is written beside its target and renamed over it (``atomic_open``), so a kill leaves the old file or the new
one; new files honour the umask as plain ``open`` does (``mkstemp`` would give 0600). Folders, and which existing
outputs may be replaced at all, are ``embedkit.outputs``'s.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from embedkit.errors import EmbedkitError

LOCK_SUFFIX = ".embedkit-lock"
NEW_MARK = ".embedkit-new."
OLD_MARK = ".embedkit-old."


# What this process has put in place (files renamed over their targets, folders swapped in), by folder: Ctrl-C's one
# line names what a rerun reuses. Only names are kept; ``kept_so_far`` counts those still there.
_in_place: dict[str, set[str]] = {}


def note_in_place(path: Path, folder: bool = False) -> None:
    """Record that ``path`` (a complete file, or with ``folder`` a whole folder) was put in place by this process."""
    if folder:
        _in_place.setdefault(str(path), set())
    else:
        _in_place.setdefault(str(path.parent), set()).add(path.name)


def kept_so_far() -> dict[str, int]:
    """Folder → complete files this process put there that still exist (0: the folder itself was swapped in)."""
    kept = {}
    for folder, names in list(_in_place.items()):
        if not os.path.isdir(folder):
            continue
        count = sum(os.path.exists(os.path.join(folder, name)) for name in list(names))
        if count or not names:
            kept[folder] = count
    return kept


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


class DiskFull(EmbedkitError):
    """The disk filled while embedkit wrote ``path``: one line with the space it needs and the space free."""

    def __init__(self, path: Path, needed: int, exact: bool) -> None:
        self.needed = needed
        free = free_bytes(path.parent)
        need = f"{'' if exact else 'more than '}{format_size(needed)}"
        super().__init__(f"no space left on device: writing it needs {need}, {format_size(free)} free", path=path)


def is_disk_full(err: BaseException) -> bool:
    """ENOSPC or EDQUOT from Python, or FAISS's C++ write error that carries the same text."""
    if isinstance(err, DiskFull):
        return True
    if isinstance(err, OSError):
        return err.errno in (errno.ENOSPC, errno.EDQUOT)
    return isinstance(err, RuntimeError) and "No space left on device" in str(err)


def free_bytes(folder: Path) -> int:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return 0


def tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (or of the file ``path``); 0 where it is gone."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def format_size(size: float) -> str:
    """Bytes as people read them (``36.00 KiB``), for messages about disk and memory."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(size) >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{int(size)} B"


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", size: int | None = None) -> Iterator[IO[Any]]:
    """Open a new file beside ``path``; rename it over ``path`` only if the block succeeds.

    ``size`` (bytes, when the caller knows it) is checked against the free space first; a disk that fills anyway is
    one ``DiskFull`` line, the temporary file removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if size is not None and free_bytes(path.parent) < size:
        raise DiskFull(path, size, exact=True)
    tmp = path.parent / f".{path.name}.{token()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # 0o666 & ~umask, as open() gives
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": "\n"})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        written = tree_bytes(tmp) if tmp.exists() else 0
        tmp.unlink(missing_ok=True)
        if is_disk_full(err) and not isinstance(err, DiskFull):
            raise DiskFull(path, max(size or 0, written), exact=size is not None) from None
        raise
    note_in_place(path)


def write_json(path: str | Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def write_text(path: str | Path, text: str) -> None:
    with atomic_open(path, size=len(text.encode("utf-8", "surrogatepass"))) as handle:
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
    with atomic_open(path, "wb", size=array.nbytes) as handle:
        np.save(handle, array, allow_pickle=False)


def save_npz(path: str | Path, **arrays: np.ndarray) -> None:
    """Several arrays in one file, written atomically (uncompressed: they are read back whole)."""
    with atomic_open(path, "wb", size=sum(a.nbytes for a in arrays.values())) as handle:
        np.savez(handle, allow_pickle=False, **arrays)


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
