"""IVF indexes whose inverted lists stay on disk (``OnDiskInvertedLists``), for corpora larger than memory.

The IVF is trained once on a sample; each embedding shard (or group of ``shards_per_block``) is added to a copy of
the trained empty index and written as a temporary block; the blocks' inverted lists are then merged into one
``index.ivfdata`` file beside ``index`` (the procedure of ``faiss.contrib.ondisk.merge_ondisk``). Searching maps
that file, so memory holds the quantizer and the document ids only.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from embedkit.encode.folder import EmbeddingsFolder
from embedkit.errors import EmbedkitError
from embedkit.index.building import FolderVectors, index_meta, new_index, train_index
from embedkit.index.faiss_index import INDEX_KINDS, Index, _to_cpu, _to_gpu
from embedkit.storage import replace_folder, sha256_file, write_json, write_lines

IVFDATA = "index.ivfdata"


@contextmanager
def _quiet_faiss() -> Iterator[None]:
    """Drop what FAISS's on-disk lists print to the C stdout ("resizing ...", "updating ondisk filename ..."),
    which would otherwise end up in the CLI's output; a no-op where the C library cannot be reached."""
    try:
        libc = ctypes.CDLL(None)
        saved = os.dup(1)
    except (OSError, AttributeError, TypeError):
        yield
        return
    sys.stdout.flush()
    libc.fflush(None)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        libc.fflush(None)
        os.dup2(saved, 1)
        os.close(saved)


def read_index_file(path: Path, on_disk: bool = False) -> faiss.Index:
    """Read a FAISS file; an on-disk index's lists are mapped (read-only) from the ``.ivfdata`` beside it, wherever
    the folder lies and whatever the cwd."""
    if not on_disk and not (path.parent / IVFDATA).exists():
        return faiss.read_index(str(path), faiss.IO_FLAG_ONDISK_SAME_DIR)
    with _quiet_faiss():
        return faiss.read_index(str(path), faiss.IO_FLAG_ONDISK_SAME_DIR | (faiss.IO_FLAG_READ_ONLY if on_disk else 0))


def ondisk_lists(index: faiss.Index) -> Any:
    """The ``OnDiskInvertedLists`` of an IVF index (through OPQ and other pre-transforms), else ``None``."""
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None:
        return None
    lists = faiss.downcast_InvertedLists(ivf.invlists)
    return lists if isinstance(lists, faiss.OnDiskInvertedLists) else None


def write_index_file(index: faiss.Index, folder: Path, final_folder: Path) -> None:
    """Write ``folder/index``; for an on-disk index also put its ``index.ivfdata`` beside it.

    The data file is hard-linked where possible (it is opened read-only, so the copies never diverge) and the header
    records the path it will have once ``folder`` is renamed to ``final_folder`` (pyserini opens it from any cwd
    while the folder stays put; embedkit finds it beside ``index`` wherever the folder moves).
    """
    lists = ondisk_lists(index)
    if lists is None:
        faiss.write_index(index, str(folder / "index"))
        return
    source = Path(lists.filename)
    try:
        os.link(source, folder / IVFDATA)
    except OSError:
        shutil.copyfile(source, folder / IVFDATA)
    lists.filename = str(final_folder.resolve() / IVFDATA)
    try:
        faiss.write_index(index, str(folder / "index"))
    finally:
        lists.filename = str(source)


def _merge_blocks(trained: faiss.Index, blocks: list[Path], ivfdata: Path) -> faiss.Index:
    """``merge_ondisk`` over ``blocks`` into a copy of ``trained``, freeing the blocks' mapped lists afterwards.

    (``faiss.contrib.ondisk.merge_ondisk`` leaks them, which keeps the deleted block files' disk space in use until
    the process exits.)
    """
    merged = faiss.clone_index(trained)
    merged_ivf = faiss.extract_index_ivf(merged)
    parts = [faiss.read_index(str(block), faiss.IO_FLAG_MMAP) for block in blocks]  # mapped, never read into memory
    pointers = faiss.InvertedListsPtrVector()
    for part in parts:
        pointers.push_back(faiss.extract_index_ivf(part).invlists)
    lists = faiss.OnDiskInvertedLists(merged_ivf.nlist, merged_ivf.code_size, str(ivfdata))
    with _quiet_faiss():
        merged.ntotal = merged_ivf.ntotal = lists.merge_from_multiple(pointers.data(), pointers.size(), False)
    merged_ivf.replace_invlists(lists, True)
    lists.this.disown()  # the merged index owns it now
    del pointers, parts
    return merged


def check_ondisk_factory(factory: str, dim: int = 8, metric: str = "ip") -> None:
    """Refuse factories whose vectors do not live in IVF inverted lists (the only kind FAISS can keep on disk)."""
    index = new_index(dim, factory, metric)
    ivf = None if isinstance(index, faiss.IndexBinary) else faiss.try_extract_index_ivf(index)
    if ivf is None or isinstance(faiss.downcast_index(ivf), faiss.IndexIVFPQR):
        raise EmbedkitError(
            f"an on-disk index needs an IVF factory such as 'IVF1024,PQ32' or 'OPQ32,IVF4096,PQ32', not '{factory}'",
            field="factory",
        )


def build_ondisk(
    folder: EmbeddingsFolder | FolderVectors,
    output: str | Path,
    factory: str = "IVF1024,Flat",
    metric: str = "ip",
    *,
    train_size: int = 1_000_000,
    add_batch_size: int = 100_000,
    shards_per_block: int = 1,
    use_gpu: bool = True,
    seed: int = 0,
    nprobe: int | None = None,
    ef_search: int | None = None,
    start: int = 0,
    stop: int | None = None,
    trained: tuple[faiss.Index, int] | None = None,
    overwrite: bool = False,
) -> Index:
    """Write an on-disk IVF index of rows ``start:stop`` to ``output`` (atomically) and open it.

    Memory holds the training sample, then one block (``shards_per_block`` embedding shards) at a time. With the same
    ``seed`` and ``train_size`` the result searches exactly like ``Index.build`` on all vectors.
    """
    vectors = folder if isinstance(folder, FolderVectors) else FolderVectors.open(folder)
    check_ondisk_factory(factory, vectors.dim, metric)
    if shards_per_block < 1:
        raise EmbedkitError("shards_per_block must be at least 1", field="shards_per_block")
    stop = len(vectors) if stop is None else stop
    if trained is None:
        trained = train_index(vectors, factory, metric, train_size=train_size, seed=seed, use_gpu=use_gpu)
    output = Path(output)
    with replace_folder(output, INDEX_KINDS, overwrite) as tmp:
        pieces = list(vectors.pieces(start, stop))
        groups = [pieces[i : i + shards_per_block] for i in range(0, len(pieces), shards_per_block)]
        blocks = []
        for number, group in enumerate(groups):
            block = _to_gpu(faiss.clone_index(trained[0])) if use_gpu else faiss.clone_index(trained[0])
            first = int(vectors.starts[group[0][0]]) + group[0][1]
            last = int(vectors.starts[group[-1][0]]) + group[-1][2]
            for row, batch in vectors.batches(first, last, add_batch_size):
                block.add_with_ids(batch, np.arange(row - start, row - start + len(batch), dtype=np.int64))
            blocks.append(tmp / f"block-{number:05d}.index")
            faiss.write_index(_to_cpu(block), str(blocks[-1]))
            del block
        merged = _merge_blocks(trained[0], blocks, tmp / IVFDATA)
        for block in blocks:
            block.unlink()
        meta = index_meta(
            factory,
            metric,
            vectors.dim,
            stop - start,
            trained[1],
            seed,
            vectors.settings,
            on_disk=True,
            ivfdata=IVFDATA,
            blocks=len(blocks),
            **vectors.range_meta(start, stop),
        )
        built = Index(merged, vectors.ids(start, stop), meta)
        built.set_search_params(nprobe=nprobe, ef_search=ef_search)  # efSearch: of an HNSW coarse quantizer
        ondisk_lists(merged).filename = str(output.resolve() / IVFDATA)  # where it will be after the rename
        faiss.write_index(merged, str(tmp / "index"))
        write_lines(tmp / "docid", built.ids)
        files = {name: sha256_file(tmp / name) for name in ("index", "docid")}
        write_json(tmp / "meta.json", {**built.meta, "files": files})
        del built, merged
    return Index.load(output, use_gpu=False)
