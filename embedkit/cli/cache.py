"""``embedkit cache list | clean``: what embedkit keeps in its cache folder, and freeing it.

Two kinds of entry live under ``$EMBEDKIT_CACHE`` (default ``~/.cache/embedkit``): ``onnx/``, the exports the onnx,
onnx-int8 and openvino backends run (one folder per network, variant and library versions, so an upgrade leaves the
old ones behind), and ``embeddings/``, the corpora that ``evaluate``, ``mine`` and the MTEB harness encoded once to
share. Listing reads small JSON files only, so it loads no torch. Cleaning takes each entry's output lock: an export
or an encode in progress finishes before its folder goes, and a writer that was waiting builds it again.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from embedkit.data.resolve import cache_home
from embedkit.errors import EmbedkitError
from embedkit.outputs import output_lock, recover
from embedkit.storage import LOCK_SUFFIX, NEW_MARK, OLD_MARK

# The folders of ``embedkit.models.onnx.onnx_cache_root`` and ``embedkit.encode.cache.default_cache_root`` and the
# export entries' record, named here so that listing imports neither torch nor the models (a test keeps them equal).
EXPORTS, EMBEDDINGS = "onnx", "embeddings"
ENTRY_FILE, ENTRY_FORMAT = "entry.json", "embedkit.onnx-export/1"
MANIFEST = "manifest.json"

cache_app = typer.Typer(
    name="cache",
    help="List and free embedkit's cache: ONNX exports and encoded corpora.",
    no_args_is_help=True,
)


@dataclass
class Entry:
    """One cache entry: its folder, the path whose ``output_lock`` guards it, what it holds."""

    key: str
    kind: str
    path: Path
    lock: Path
    holds: str
    created: str
    leftovers: tuple[Path, ...] = ()

    @property
    def size(self) -> int:
        return sum(_size(path) for path in (self.path, *self.leftovers))


def _size(path: Path) -> int:
    """Bytes of the files under ``path`` (0 when it is gone: a writer may remove it at any moment)."""
    if not path.is_dir():
        return path.lstat().st_size if os.path.lexists(path) else 0
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except FileNotFoundError:
                continue
    return total


def _read(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _shown(iso: str) -> str:
    """An ISO time as ``_when`` shows one; as written when it is not one."""
    try:
        return _when(datetime.fromisoformat(iso).timestamp())
    except ValueError:
        return iso


def _export_entries(root: Path) -> list[Entry]:
    """A folder per export, plus the names only a temporary folder holds (an export being written, or killed)."""
    leftovers: dict[str, list[Path]] = {}
    for path in root.iterdir():
        name = path.name
        if name.startswith(".") and not name.endswith(LOCK_SUFFIX):
            mark = NEW_MARK if NEW_MARK in name else OLD_MARK if OLD_MARK in name else None
            if mark is not None:
                leftovers.setdefault(name[1 : name.index(mark)], []).append(path)
        elif not name.startswith(".") and path.is_dir():
            leftovers.setdefault(name, [])
    entries = []
    for name, extra in sorted(leftovers.items()):
        folder = root / name
        record = _read(folder / ENTRY_FILE)
        if record.get("format") == ENTRY_FORMAT:
            holds = str(record.get("holds", "ONNX export"))
            holds += f" (from {record['model']})" if record.get("model") else ""
            created = _shown(str(record.get("created", "")))
        elif folder.is_dir():
            holds, created = "ONNX export by an older embedkit (never reused)", _when(folder.stat().st_mtime)
        else:
            holds = "unfinished export (being written, or its writer was killed)"
            created = _when(min(path.stat().st_mtime for path in extra))
        entries.append(Entry(name, "export", folder, folder, holds, created, tuple(extra)))
    return entries


def _embeddings_entries(root: Path) -> list[Entry]:
    entries = []
    for folder in sorted(path for path in root.iterdir() if path.is_dir() and not path.name.startswith(".")):
        manifest = _read(folder / MANIFEST)
        settings = manifest.get("settings") if isinstance(manifest.get("settings"), dict) else {}
        if manifest:
            holds = f"{manifest.get('count', '?')} documents encoded by {settings.get('model', '?')}"
            holds += f" ({manifest.get('dim', '?')} dims{'' if manifest.get('complete') else ', partial'})"
        else:
            holds = "embeddings folder without a manifest (being written, or its writer was killed)"
        times = [path.stat().st_mtime for path in folder.iterdir() if not path.name.startswith(".")]
        created = _when(min(times, default=folder.stat().st_mtime))
        entries.append(Entry(folder.name, "embeddings", folder, folder / MANIFEST, holds, created))
    return entries


def cache_entries(home: Path | None = None) -> list[Entry]:
    """Every entry under ``home`` (``cache_home()``): the exports, then the encoded corpora."""
    home = cache_home() if home is None else home
    found = []
    for kind, scan in ((EXPORTS, _export_entries), (EMBEDDINGS, _embeddings_entries)):
        if (home / kind).is_dir():
            found += scan(home / kind)
    return found


def free(entry: Entry) -> int:
    """Delete ``entry`` under its output lock (after any writer of it finishes); the bytes it held."""
    with output_lock(entry.lock):
        if entry.kind == "export":
            recover(entry.path)  # restores a folder a killed swap moved aside, deletes temporaries
        size = entry.size
        if entry.path.is_dir():
            shutil.rmtree(entry.path)
    return size


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


@cache_app.command("list")
def list_entries() -> None:
    """Each entry: its key, kind, size, when it was made and what it holds; then the total.

    Example: [bold]embedkit cache list[/bold]
    """
    home = cache_home()
    entries = cache_entries(home)
    if entries:
        width = max(len(entry.key) for entry in entries)
        typer.echo(f"{'KEY':<{width}}  {'KIND':<10}  {'SIZE':>10}  {'CREATED':<20}  HOLDS")
    total = 0
    for entry in entries:
        size = entry.size
        total += size
        typer.echo(f"{entry.key:<{width}}  {entry.kind:<10}  {_mb(size):>10}  {entry.created:<20}  {entry.holds}")
    typer.echo(f"{len(entries)} entries, {_mb(total)} in {home}")


@cache_app.command("clean")
def clean(
    keys: Annotated[
        Optional[list[str]], typer.Argument(help="Keys of the entries to free, as 'embedkit cache list' shows them.")
    ] = None,
    everything: Annotated[bool, typer.Option("--all", help="Free every entry.")] = False,
) -> None:
    """Free cache entries (each waits for a writer of it to finish); prints what was freed and its size.

    Example: [bold]embedkit cache clean --all[/bold]
    """
    if bool(keys) == everything:
        raise EmbedkitError("give the keys of the entries to free, or --all (not both)")
    home = cache_home()
    entries = cache_entries(home)
    if not everything:
        known = {entry.key: entry for entry in entries}
        unknown = [key for key in dict.fromkeys(keys or []) if key not in known]
        if unknown:
            raise EmbedkitError(f"no cache entry {', '.join(unknown)} in {home} (see 'embedkit cache list')")
        entries = [known[key] for key in dict.fromkeys(keys or [])]
    total = 0
    for entry in entries:
        size = free(entry)
        total += size
        typer.echo(f"freed {entry.key} ({entry.kind}, {_mb(size)}): {entry.holds}")
    typer.echo(f"freed {len(entries)} entries, {_mb(total)}")


def register(app: typer.Typer) -> None:
    app.add_typer(cache_app)
