"""Outputs that are never lost: only embedkit's own kind is replaced, folders are swapped in whole, writers wait.

- An existing output is replaced only when it is an embedkit output of the same kind, and only when the caller
  says so (``--overwrite``); a folder embedkit did not write is never replaced (``check_output_folder``).
- A folder is built beside its target and swapped in whole (``replace_folder``). On Linux the swap is one
  ``renameat2(RENAME_EXCHANGE)``, so at every instant the path holds the old folder or the new one, complete;
  elsewhere it is two renames, and a kill between them is repaired by the next writer (``recover``).
- Writers of one output, in other processes or other threads, are serialised by a real file lock (``output_lock``).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from embedkit.errors import EmbedkitError
from embedkit.storage import (
    LOCK_SUFFIX,
    NEW_MARK,
    OLD_MARK,
    DiskFull,
    fsync_folder,
    is_disk_full,
    is_litter,
    note_in_place,
    token,
    tree_bytes,
)

logger = logging.getLogger(__name__)
# The file in each kind of embedkit output folder whose "format" field says what wrote it ("embedkit.<kind>/<n>").
MARKER_FILES = (
    "meta.json",
    "report.json",
    "manifest.json",
    "compare.json",
    "embedkit_training.json",
    "embedkit_pretraining.json",
    "reproduce.json",
    "embedkit_static.json",
    "embedkit_merge.json",
)
# The outputs each thread holds the lock of (re-entrancy is per thread, never per process).
_held = threading.local()


# --- which outputs may be replaced ---------------------------------------------------------------------------------


def output_kind(folder: Path) -> str | None:
    """``index``, ``report``, ``embeddings`` ... when ``folder`` is an embedkit output (by its marker's "format")."""
    for name in MARKER_FILES:
        marker = folder / name
        if not marker.is_file():
            continue
        try:
            found = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        fmt = found.get("format") if isinstance(found, dict) else None
        if isinstance(fmt, str) and fmt.startswith("embedkit."):
            return fmt.removeprefix("embedkit.").split("/")[0]
    return None


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def _is_empty(folder: Path) -> bool:
    return all(is_litter(entry.name) for entry in folder.iterdir())


def check_parent(path: Path, flag: str = "--output") -> None:
    """The folder that will hold ``path`` exists (or can be made) and is writable."""
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise EmbedkitError("is a file, so nothing can be written under it", path=parent, field=flag)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise EmbedkitError("no permission to write here", path=parent, field=flag)


def check_output_folder(
    path: str | Path,
    kind: str | tuple[str, ...],
    overwrite: bool = False,
    *,
    flag: str = "--output",
    replaceable: Callable[[Path], bool] | None = None,
) -> bool:
    """Refuse to write a ``kind`` folder at ``path`` where that would lose data; True when one will be replaced.

    A path that does not exist, or an empty folder, is free. An embedkit output of the same ``kind`` is replaced
    with ``overwrite``, or without it when ``replaceable(path)`` says it is this command's own earlier output with
    the same settings. Anything else (a file, a symbolic link, a folder of other files) is refused whatever the flags.
    """
    path = Path(path)
    kinds = (kind,) if isinstance(kind, str) else kind
    if path.is_symlink():
        raise EmbedkitError("is a symbolic link; give the folder it points to", path=path, field=flag)
    if not path.exists():
        check_parent(path, flag)
        return False
    if not path.is_dir():
        raise EmbedkitError(f"exists and is a file; give a path for a new {kinds[0]} folder", path=path, field=flag)
    if not os.access(path.absolute().parent, os.W_OK | os.X_OK):
        raise EmbedkitError("no permission to replace this folder", path=path, field=flag)
    if _is_empty(path):
        return True
    found = output_kind(path)
    if found not in kinds:
        what = "files embedkit did not write" if found is None else f"embedkit {found}, not {_a(kinds[0])}"
        raise EmbedkitError(f"holds {what}; embedkit will not replace it: choose another path", path=path, field=flag)
    if not overwrite and not (replaceable is not None and replaceable(path)):
        raise EmbedkitError(f"holds an earlier embedkit {found}; pass --overwrite to replace it", path=path, field=flag)
    return True


def check_output_file(
    path: str | Path, overwrite: bool, recognise: Callable[[Path], bool], what: str, flag: str = "--output"
) -> None:
    """Refuse to write a file over anything but an earlier embedkit ``what`` (and that only with ``overwrite``)."""
    path = Path(path)
    if path.is_dir():
        raise EmbedkitError(f"is a folder; give a path for the {what} file", path=path, field=flag)
    if not path.exists():
        check_parent(path, flag)
        return
    if not os.access(path.absolute().parent, os.W_OK | os.X_OK):
        raise EmbedkitError("no permission to replace this file", path=path, field=flag)
    if not recognise(path):
        raise EmbedkitError(f"exists and is not an embedkit {what}; choose another path", path=path, field=flag)
    if not overwrite:
        raise EmbedkitError(f"holds an earlier {what}; pass --overwrite to replace it", path=path, field=flag)


# --- locks and swaps -------------------------------------------------------------------------------------------------


def _held_here() -> set[Path]:
    """The outputs this thread holds the lock of."""
    held = getattr(_held, "paths", None)
    if held is None:
        held = _held.paths = set()
    return held


@contextlib.contextmanager
def output_lock(path: str | Path) -> Iterator[None]:
    """Hold an exclusive lock on writing ``path`` (``flock`` on a file beside it, removed on release).

    A second writer waits for the first, whether it is another process or another thread of this one: each holder
    opens the lock file itself, and two open files' ``flock`` locks conflict even within one process. Re-entrant
    within a thread only, so a second thread never skips the lock and ``recover`` never deletes a live writer's
    temporary folder. Where ``fcntl`` is missing it does nothing.
    """
    path = Path(path).absolute()
    held = _held_here()
    if path in held:
        yield
        return
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    lock = path.parent / f".{path.name}{LOCK_SUFFIX}"
    while True:
        # each time: the holder we waited for may have deleted the folder that held the lock file (a cache cleaned)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            who = "another thread of this process" if holder == str(os.getpid()) else f"embedkit process {holder}"
            logger.warning("waiting for %s writing %s", who, path)
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:  # the holder we waited for unlinks the file before it unlocks: then lock the file there now
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    held.add(path)
    try:
        yield
    finally:
        held.discard(path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)  # while still locked: a waiter on this file then finds it gone and takes the new one
        os.close(fd)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where the system cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError, TypeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(a), None, str(b))


def commit_folder(new: Path, target: Path) -> None:
    """Put the complete folder ``new`` at ``target`` in one step, then delete what was there before."""
    if not os.path.lexists(target):
        os.rename(new, target)
    elif _exchange(new, target):
        shutil.rmtree(new)  # it holds the old folder now
    else:  # two renames; ``recover`` restores the old folder if a kill falls between them
        old = target.parent / f".{target.name}{OLD_MARK}{token()}"
        os.rename(target, old)
        os.rename(new, target)
        shutil.rmtree(old)
    fsync_folder(target.parent)


def recover(target: Path) -> None:
    """Repair what a killed write of ``target`` left: restore a folder moved aside, delete temporary folders.

    Call it holding ``output_lock(target)``, so no live writer's temporary folder is touched.
    """
    prefix = f".{target.name}"
    leftovers = [p for p in target.parent.glob(f"{prefix}.embedkit-*") if not p.name.endswith(LOCK_SUFFIX)]
    olds = sorted((p for p in leftovers if p.name.startswith(prefix + OLD_MARK)), key=lambda p: p.stat().st_mtime)
    if olds and not os.path.lexists(target):
        os.rename(olds[-1], target)
        leftovers.remove(olds[-1])
    for leftover in leftovers:
        shutil.rmtree(leftover, ignore_errors=True)


@contextlib.contextmanager
def replace_folder(
    path: str | Path,
    kind: str | tuple[str, ...],
    overwrite: bool = False,
    *,
    replaceable: Callable[[Path], bool] | None = None,
) -> Iterator[Path]:
    """A new folder to fill beside ``path``; when the block succeeds it takes ``path``'s place in one step.

    The old folder (if any) must pass ``check_output_folder``; a failed block leaves it untouched and no temporary
    folder behind. The write holds ``output_lock(path)``.
    """
    path = Path(path).absolute()
    with output_lock(path):
        recover(path)
        check_output_folder(path, kind, overwrite, replaceable=replaceable)
        new = path.parent / f".{path.name}{NEW_MARK}{token()}"
        os.mkdir(new)  # 0o777 & ~umask
        try:
            yield new
            commit_folder(new, path)
        except BaseException as err:
            full = is_disk_full(err)
            written = tree_bytes(new) if full else 0  # what the new folder held when the disk filled
            shutil.rmtree(new, ignore_errors=True)
            if full:  # named at the output the user asked for, with what the whole new folder needs
                raise DiskFull(path, written + getattr(err, "needed", 0), exact=False) from None
            raise
        note_in_place(path, folder=True)


def refuse_inside_other_output(folder: str | Path, kind: str, flag: str = "--output", *, holds: bool = False) -> None:
    """Refuse to write a ``kind`` at ``folder`` inside another embedkit output (an index, embeddings, a report...):
    replacing that output (``--overwrite``) swaps its folder whole and would delete this one with it.

    ``folder`` is the path the new output takes (it may be an earlier output of ``kind``, to be replaced), or with
    ``holds`` the folder it is written under (``evaluate -o``), which must not be an output itself. Every existing
    folder above is looked at for an embedkit marker (``output_kind``), symbolic links resolved. Nothing is created.
    """
    target = Path(folder).absolute()
    first = target if holds else target.parent
    for parent in [first, *first.parents]:
        real = parent.resolve()
        found = output_kind(real) if real.is_dir() else None
        if found is not None:
            relation = "is" if parent == target else "is inside"
            raise EmbedkitError(
                f"{relation} the embedkit {found} folder {real}; replacing that {found} would delete this {kind} "
                "with it: choose a folder outside it",
                path=folder,
                field=flag,
            )
