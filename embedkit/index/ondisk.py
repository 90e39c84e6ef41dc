"""IVF indexes whose inverted lists stay on disk (``OnDiskInvertedLists``), for corpora larger than memory.

The IVF is trained once on a sample; each embedding shard file (or group of ``shard_files_per_block``) is added to
a copy of the trained empty index and written as a temporary block; the blocks' inverted lists are then merged into
one ``index.ivfdata`` file beside ``index`` (the procedure of ``faiss.contrib.ondisk.merge_ondisk``). Searching maps
that file, so memory holds the quantizer and the document ids only.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from embedkit.errors import EmbedkitError
from embedkit.index.building import Trained, train_index
from embedkit.index.faiss_helpers import (
    INDEX_KINDS,
    IVFDATA,
    BuildSettings,
    index_meta,
    new_index,
    to_cpu,
    to_gpu,
)
from embedkit.index.faiss_index import Index
from embedkit.index.index_files import read_index_file
from embedkit.index.vectors import Vectors
from embedkit.outputs import replace_folder

# FAISS's merge prints "resizing ..." to the C stdout, unconditionally: it runs in a child whose stdout is dropped,
# so this process's descriptors stay as they are. argv: the trained empty index, the lists file, the merged index's
# path, then the blocks (mapped, never read into memory).
MERGE = """
import sys, faiss
trained, ivfdata, output, *blocks = sys.argv[1:]
merged = faiss.read_index(trained)
ivf = faiss.extract_index_ivf(merged)
parts = [faiss.read_index(block, faiss.IO_FLAG_MMAP) for block in blocks]
pointers = faiss.InvertedListsPtrVector()
for part in parts:
    pointers.push_back(faiss.extract_index_ivf(part).invlists)
lists = faiss.OnDiskInvertedLists(ivf.nlist, ivf.code_size, ivfdata)
merged.ntotal = ivf.ntotal = lists.merge_from_multiple(pointers.data(), pointers.size(), False)
ivf.replace_invlists(lists, True)
lists.this.disown()
faiss.write_index(merged, output)
"""


def _merge_blocks(trained: faiss.Index, blocks: list[Path], folder: Path) -> faiss.Index:
    """``merge_ondisk`` over ``blocks`` into a copy of ``trained``, its lists in ``folder/index.ivfdata`` (the
    procedure of ``faiss.contrib.ondisk.merge_ondisk``, in a child process: see ``MERGE``)."""
    empty, merged = folder / "trained.index", folder / "merged.index"
    faiss.write_index(trained, str(empty))
    arguments = [str(empty), str((folder / IVFDATA).resolve()), str(merged), *map(str, blocks)]
    done = subprocess.run([sys.executable, "-c", MERGE, *arguments], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if done.returncode:
        raise RuntimeError(f"merging the on-disk lists failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    index = read_index_file(merged, on_disk=True)
    empty.unlink()
    merged.unlink()
    return index


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
    vectors: Any,
    output: str | Path,
    settings: BuildSettings,
    *,
    start: int = 0,
    stop: int | None = None,
    trained: Trained | None = None,
    shard_files_per_block: int = 1,
    overwrite: bool = False,
    meta_extra: dict[str, Any] | None = None,
    also: Callable[[Path], None] | None = None,
) -> Index:
    """Write an on-disk IVF index of rows ``start:stop`` to ``output`` (as one unit) and open it.

    Memory holds the training sample, then one block (``shard_files_per_block`` shard files) at a time. With the same
    ``seed`` and ``train_size`` the result searches exactly like ``Index.build`` on all vectors. ``meta_extra`` goes
    into meta.json; ``also(folder)`` writes more files into the new folder before it is swapped in (a store).
    """
    vectors = Vectors.open(vectors)
    check_ondisk_factory(settings.factory, vectors.dim, settings.metric)
    if shard_files_per_block < 1:
        raise EmbedkitError("must be at least 1", field="shard_files_per_block")
    stop = len(vectors) if stop is None else stop
    trained = trained or train_index(vectors, settings)
    output = Path(output)
    with replace_folder(output, INDEX_KINDS, overwrite) as tmp:
        pieces = list(vectors.pieces(start, stop))
        groups = [pieces[i : i + shard_files_per_block] for i in range(0, len(pieces), shard_files_per_block)]
        blocks = []
        for number, group in enumerate(groups):
            block = faiss.clone_index(trained[0])
            block = to_gpu(block) if settings.use_gpu else block
            first = int(vectors.offsets[group[0][0]]) + group[0][1]
            last = int(vectors.offsets[group[-1][0]]) + group[-1][2]
            for row, batch in vectors.batches(first, last, settings.add_batch_size):
                block.add_with_ids(batch, np.arange(row - start, row - start + len(batch), dtype=np.int64))
            blocks.append(tmp / f"block-{number:05d}.index")
            faiss.write_index(to_cpu(block), str(blocks[-1]))
            del block
        merged = _merge_blocks(trained[0], blocks, tmp)
        for block in blocks:
            block.unlink()
        extra = {"on_disk": True, "ivfdata": IVFDATA, "blocks": len(blocks), **vectors.record(start, stop)}
        extra |= meta_extra or {}
        meta = index_meta(settings, vectors.dim, stop - start, trained[1], vectors.settings, **extra)
        built = Index(merged, vectors.ids(start, stop), meta)
        built.set_search_params(nprobe=settings.nprobe, ef_search=settings.ef_search)  # efSearch: of an HNSW quantizer
        built.write_files(tmp, output)  # its lists are in tmp already; the header records where they will be
        del built, merged
        if also is not None:
            also(tmp)
    return Index.load(output, use_gpu=False)
