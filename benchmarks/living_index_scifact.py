"""An index that lives, on SciFact with the default model: changes against a rebuild, filtered search's speed.

    python benchmarks/living_index_scifact.py [--output benchmarks/results/living_index_scifact.json]

1. **Changes.** A snapshot of the first 3,000 documents takes 1,000 seeded random adds, deletes and upserts (1 to 5
   documents each, vectors drawn once from the other 2,183 documents, a compaction half way). Flat: its top 10 for the
   300 test queries against an index built from scratch on the final documents (ids equal, largest score difference).
   IVF (``IVF64,Flat``, nprobe 8, trained on the snapshot and kept): recall@10 against that exact rebuild, beside an
   IVF trained from scratch on the final documents at the same nprobe.
2. **Filters.** All 5,183 documents with a ``bucket`` field (``row % 1000``): filters keeping 50 %, 5 % and 0.1 % of
   the corpus, for Flat, ``HNSW32`` (efSearch 64) and ``IVF64,Flat`` (nprobe 8): queries/s (best of 3 timed runs of
   the 300 queries, k=10, one thread, alternating filtered and unfiltered), hits per query, and recall@10 against
   exact search over the matching documents. HNSW and IVF twice: as they run (a filter whose matching vectors fit
   ``LiveIndex.FULL_SCAN_BYTES`` is searched exactly) and with the full scan off (FAISS's own filtered search).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "beir" / "scifact"
CUT, STEPS, SEED = 3000, 1000, 7
FILTERS = {"50%": "bucket < 500", "5%": "bucket < 50", "0.1%": "bucket == 7"}
KINDS = {"Flat": {}, "HNSW32": {"ef_search": 64}, "IVF64,Flat": {"nprobe": 8}}


def vectors() -> tuple[np.ndarray, list[str], np.ndarray]:
    from embedkit import load_dataset, load_model
    from embedkit.encode.cache import cached_corpus_embeddings

    model, dataset = load_model(device="cpu"), load_dataset(SCIFACT)
    folder = cached_corpus_embeddings(model, dataset, REPO / ".cache" / "embeddings")
    queries = model.encode_queries(list(dataset.split_queries("test").values()))
    return np.asarray(folder.embeddings(), dtype=np.float32), folder.ids(), np.asarray(queries, dtype=np.float32)


def recall(found: list[list[str]], truth: list[list[str]]) -> float:
    return float(np.mean([len(set(f) & set(t)) / max(1, len(t)) for f, t in zip(found, truth, strict=True)]))


def random_changes(live, matrix: np.ndarray, ids: list[str], cut: int, steps: int, seed: int, metadata=None) -> dict:
    """``steps`` seeded adds, deletes and upserts (1 to 5 documents each) on a ``LiveIndex`` of documents
    ``0 .. cut - 1``, new vectors drawn once each from the rest (no two documents share one: no tied scores), a
    compaction half way; ``metadata(row)`` gives a document's metadata. Returns the final id -> vector row."""
    rng, state, fresh = random.Random(seed), {ids[i]: i for i in range(cut)}, list(range(cut, len(ids)))
    rng.shuffle(fresh)
    meta = metadata or (lambda row: None)
    for step in range(steps):
        kind = rng.choice(("add", "delete", "upsert"))
        if kind == "add" and fresh:
            rows = [fresh.pop() for _ in range(min(len(fresh), rng.randint(1, 5)))]
            live.add([ids[r] for r in rows], matrix[rows], metadata=[meta(r) for r in rows])
            state.update({ids[r]: r for r in rows})
        elif kind == "delete" and len(state) > 10:
            gone = rng.sample(sorted(state), rng.randint(1, 3))
            live.delete(gone)
            for doc_id in gone:
                del state[doc_id]
        elif kind == "upsert" and len(fresh) >= 3:
            targets = rng.sample(sorted(state), rng.randint(1, 3))
            rows = [fresh.pop() for _ in targets]  # an existing id takes an unused document's vector
            live.upsert(targets, matrix[rows], metadata=[meta(r) for r in rows])
            state.update(dict(zip(targets, rows, strict=True)))
        if step == steps // 2:
            live.compact()
    return state


def changes(matrix, ids, queries, work: Path) -> dict:
    from embedkit.index import Index
    from embedkit.index.live import LiveIndex

    out = {}
    for factory, params in (("Flat", {}), ("IVF64,Flat", {"nprobe": 8})):
        folder = work / factory.replace(",", "_")
        Index.build(matrix[:CUT], ids[:CUT], factory, use_gpu=False, **params).save(folder)
        live = LiveIndex.open(folder)
        started = time.perf_counter()
        state = random_changes(live, matrix, ids, CUT, STEPS, SEED)
        seconds = time.perf_counter() - started
        final = sorted(state)
        exact = Index.build(matrix[[state[i] for i in final]], final, "Flat", use_gpu=False)
        truth_scores, truth = exact.search(queries, 10)
        scores, hits = LiveIndex.load_live(folder).search(queries, 10)  # replayed from disk
        row = {"documents": len(final), "seconds_for_changes": round(seconds, 2), "check": live.check()["ok"]}
        if factory == "Flat":
            row |= {"ids_equal": hits == truth, "max_score_difference": float(np.abs(scores - truth_scores).max())}
        else:
            fresh = Index.build(matrix[[state[i] for i in final]], final, factory, use_gpu=False, **params)
            rebuilt = recall(fresh.search(queries, 10)[1], truth)
            row |= {"recall_at_10": recall(hits, truth), "fresh_build_recall_at_10": rebuilt}
        out[factory] = row
    return out


def filters(matrix, ids, queries, work: Path) -> dict:
    from embedkit.index import Index
    from embedkit.index.live import LiveIndex

    truths = {}
    for share, expression in {"none": None, **FILTERS}.items():
        keep = [i for i in range(len(ids)) if expression is None or _keeps(expression, i)]
        exact = Index.build(matrix[keep], [ids[i] for i in keep], "Flat", use_gpu=False)
        truths[share] = (len(keep), exact.search(queries, 10)[1])
    out = {}
    for factory, params in KINDS.items():
        folder = work / f"filters-{factory.replace(',', '_')}"
        Index.build(matrix, ids, factory, use_gpu=False, **params).save(folder)
        live = LiveIndex.open(folder, fields={"bucket": "int"})
        live.upsert(ids, matrix, metadata=[{"bucket": row % 1000} for row in range(len(ids))])
        live.compact()  # the upsert's tombstones folded in: the index holds each document once
        for full_scan in (True, False) if factory != "Flat" else (True,):
            live = LiveIndex.load_live(folder)
            if not full_scan:  # the index's own filtered search (what a corpus too large for a full scan gets)
                live.FULL_SCAN_BYTES = 0
            out[factory if full_scan else f"{factory}, no full scan"] = _filtered(live, queries, truths)
    return out


def _filtered(live, queries: np.ndarray, truths: dict) -> dict:
    rows = {}
    for share, expression in {"none": None, **FILTERS}.items():
        documents, truth = truths[share]
        hits = live.search(queries, 10, filter=expression)[1]
        rows[share] = {"documents": documents, "hits_per_query": float(np.mean([len(h) for h in hits])),
                       "recall_at_10": recall(hits, truth), "seconds": []}  # fmt: skip
    for _ in range(3):  # alternate the filters in each round: a slower stretch of the machine hits all alike
        for share, expression in {"none": None, **FILTERS}.items():
            started = time.perf_counter()
            live.search(queries, 10, filter=expression)
            rows[share]["seconds"].append(time.perf_counter() - started)
    for row in rows.values():
        row["queries_per_second"] = round(len(queries) / min(row.pop("seconds")), 1)
    return rows


def _keeps(expression: str, row: int) -> bool:
    bucket = row % 1000
    return {"bucket < 500": bucket < 500, "bucket < 50": bucket < 50, "bucket == 7": bucket == 7}[expression]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "living_index_scifact.json")
    args = parser.parse_args()
    import faiss
    from encode import _cpu_name

    faiss.omp_set_num_threads(1)  # this script's own process: both sides of each ratio on one thread
    matrix, ids, queries = vectors()
    with tempfile.TemporaryDirectory() as work:
        result = {
            "command": "python benchmarks/living_index_scifact.py",
            "date": date.today().isoformat(),
            "cpu": _cpu_name(),
            "python": sys.version.split()[0],
            "faiss": faiss.__version__,
            "changes": changes(matrix, ids, queries, Path(work)),
            "filters": filters(matrix, ids, queries, Path(work)),
        }
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
