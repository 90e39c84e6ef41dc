"""Index folder file I/O (meta.json, the FAISS file and its on-disk lists), kept apart from the FAISS helpers."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import faiss

from embedkit.errors import EmbedkitError
from embedkit.index.faiss_helpers import FORMAT, IVFDATA, PARTITIONED_FORMATS, faiss_reason, to_cpu
from embedkit.storage import read_json, read_lines, sha256_file


def read_meta(path: Path) -> dict[str, Any]:
    """An index folder's ``meta.json`` (empty for a pyserini folder without one)."""
    if not (path / "meta.json").is_file():
        return {}
    meta = read_json(path / "meta.json")
    if not isinstance(meta, dict):
        raise EmbedkitError("expected a JSON object", path=path / "meta.json")
    return meta


def is_partitioned(path: str | Path) -> bool:
    """Whether ``path`` is a partitioned index folder (by its meta.json)."""
    return read_meta(Path(path)).get("format") in PARTITIONED_FORMATS


def ondisk_lists(index: faiss.Index) -> Any:
    """The ``OnDiskInvertedLists`` of an IVF index (through OPQ and other pre-transforms), else ``None``."""
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None:
        return None
    lists = faiss.downcast_InvertedLists(ivf.invlists)
    return lists if isinstance(lists, faiss.OnDiskInvertedLists) else None


def read_index_file(path: Path, binary: bool = False, on_disk: bool = False) -> faiss.Index | faiss.IndexBinary:
    """Read a FAISS file; an on-disk index's lists are mapped (read-only) from the ``.ivfdata`` beside it, wherever
    the folder lies and whatever the cwd. A file FAISS cannot read is a user error naming it."""
    try:
        if binary:
            return faiss.read_index_binary(str(path))
        if not on_disk and not (path.parent / IVFDATA).exists():  # lists in the file (SAME_DIR: never elsewhere's)
            return faiss.read_index(str(path), faiss.IO_FLAG_ONDISK_SAME_DIR)
        return _map_lists(path, read_only=on_disk)
    except RuntimeError as err:
        raise EmbedkitError(f"not a readable FAISS index ({faiss_reason(err)})", path=path) from None


def _map_lists(path: Path, read_only: bool) -> faiss.Index:
    """The index at ``path`` with its on-disk lists mapped from the ``index.ivfdata`` beside it, wherever the folder
    now lies: the header is read without the lists, which are then mapped. (FAISS's ``IO_FLAG_ONDISK_SAME_DIR``
    does the same but prints to the C stdout on every read, and silencing that means pointing the process's
    stdout elsewhere while it runs.)"""
    index = faiss.read_index(str(path), faiss.IO_FLAG_SKIP_IVF_DATA)
    lists = ondisk_lists(index)
    if lists is None:  # lists in the file itself: read them
        return faiss.read_index(str(path))
    data = (path.parent / IVFDATA).resolve()
    if not data.is_file() or data.stat().st_size < lists.totsize:
        raise EmbedkitError(f"missing or shorter than the {lists.totsize} bytes its index maps", path=data)
    lists.filename, lists.read_only = str(data), read_only
    lists.do_mmap()
    return index


def read_index_folder(path: Path) -> tuple[faiss.Index | faiss.IndexBinary, list[str], dict[str, Any]]:
    """The FAISS index, ids and meta.json of an embedkit or pyserini index folder, checksums and counts checked."""
    if not path.is_dir():
        raise EmbedkitError("no such index folder", path=path)
    if not (path / "index").exists() and is_partitioned(path):
        raise EmbedkitError("a partitioned index folder: open it with embedkit.index.load_index", path=path)
    for name in ("index", "docid"):
        if not (path / name).is_file():
            raise EmbedkitError(f"the index folder has no '{name}' file", path=path)
    meta = read_meta(path)
    for name, digest in (meta.get("files") or {}).items():
        if sha256_file(path / name) != digest:
            raise EmbedkitError(
                "changed since it was written (its sha256 differs from meta.json); rebuild the index", path=path / name
            )
    # an on-disk index's lists are mapped from the index.ivfdata beside 'index', whatever the cwd
    index = read_index_file(path / "index", binary=bool(meta.get("binary")), on_disk=bool(meta.get("on_disk")))
    ids = read_lines(path / "docid")
    if index.ntotal != len(ids):
        raise EmbedkitError(f"'index' holds {index.ntotal} vectors but 'docid' lists {len(ids)} ids", path=path)
    if meta.get("dim") not in (None, index.d):
        raise EmbedkitError(f"meta.json says dim {meta['dim']}, the index has {index.d}", path=path, field="dim")
    meta.setdefault("format", FORMAT)
    meta.setdefault("dim", int(index.d))
    meta.setdefault("count", len(ids))
    return index, ids, meta


def write_index_file(index: faiss.Index | faiss.IndexBinary, folder: Path, final_folder: Path) -> None:
    """Write ``folder/index``; for an on-disk index also put its ``index.ivfdata`` beside it.

    The data file is hard-linked where possible (it is opened read-only, so the copies never diverge) and the header
    records the path it will have once ``folder`` is renamed to ``final_folder`` (pyserini opens it from any cwd
    while the folder stays put; embedkit finds it beside ``index`` wherever the folder moves).
    """
    if isinstance(index, faiss.IndexBinary):
        faiss.write_index_binary(index, str(folder / "index"))
        return
    index = to_cpu(index)
    lists = ondisk_lists(index)
    if lists is None:
        faiss.write_index(index, str(folder / "index"))
        return
    source = Path(lists.filename)
    if source.resolve() != (folder / IVFDATA).resolve():  # a new on-disk index has written its lists there already
        try:
            os.link(source, folder / IVFDATA)
        except OSError:
            shutil.copyfile(source, folder / IVFDATA)
    lists.filename = str(final_folder.resolve() / IVFDATA)
    try:
        faiss.write_index(index, str(folder / "index"))
    finally:
        lists.filename = str(source)
