"""Index building and search: embedkit's ``Index`` vs raw FAISS with the same factory string, same vectors.

    python benchmarks/index.py [--sizes 10000,100000,1000000] [--output runs/bench-index]
    python benchmarks/index.py --scifact            # Flat search on the real SciFact embeddings as well
    python benchmarks/index.py --max-memory 0.5GiB,1GiB,4GiB --sizes 1000000   # the index a budget chooses

Vectors are synthetic, 384-d (all-MiniLM-L6-v2's size), L2-normalised, with clustered structure (2,000 Gaussian
centres); 1,000 queries come from the same distribution. Each (size, factory, implementation) is built in its own
child process, so its peak RSS (Linux ``VmHWM``) is its own; the vectors are read memory-mapped from a ``.npy``.
Queries/s is the best of 3 timed batch searches of all queries at k=10; recall@10 is against exact inner-product
search. Both sides train on the same seeded sample of ``train_size`` vectors. Writes ``result.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from peak_memory import peak_rss_mib

DIM = 384
QUERIES = 1_000
TRAIN_SIZE = 100_000
FACTORIES = {
    10_000: {"Flat": {}, "IVF256,Flat": {"nprobe": 16}, "IVF256,PQ48": {"nprobe": 16}, "HNSW32": {"efSearch": 64}},
    100_000: {"Flat": {}, "IVF1024,Flat": {"nprobe": 32}, "IVF1024,PQ48": {"nprobe": 32}},
    1_000_000: {"Flat": {}, "IVF1024,PQ48": {"nprobe": 32}},
}


def clustered(n: int, seed: int, centres: int = 2_000, latent: int = 48, chunk: int = 100_000) -> np.ndarray:
    """Cluster centres plus variation in a shared low-dimensional subspace plus a little isotropic noise: like text
    embeddings, the data has far fewer effective dimensions than 384 (isotropic noise would make every ANN method
    look worse than it is on real embeddings)."""
    rng = np.random.default_rng(0)
    means = rng.standard_normal((centres, DIM)).astype(np.float32)
    basis = rng.standard_normal((latent, DIM)).astype(np.float32)
    rng = np.random.default_rng(seed)
    out = np.empty((n, DIM), dtype=np.float32)
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        block = means[rng.integers(0, centres, m)]
        block += 0.115 * rng.standard_normal((m, latent), dtype=np.float32) @ basis  # IVF recall ~0.9
        block += 0.3 * rng.standard_normal((m, DIM), dtype=np.float32)
        out[start : start + m] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def prepare(folder: Path, n: int) -> None:
    """Vectors, queries and exact top-10 for size ``n``, written once."""
    import faiss

    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / f"truth-{n}.npy").is_file():
        base = clustered(n, seed=1)
        np.save(folder / f"vectors-{n}.npy", base)
        queries = clustered(QUERIES, seed=2)
        np.save(folder / "queries.npy", queries)
        exact = faiss.IndexFlatIP(DIM)
        exact.add(base)
        np.save(folder / f"truth-{n}.npy", exact.search(queries, 10)[1])


def worker(folder: Path, n: int, factory: str, params: dict[str, int], implementation: str) -> dict:
    """One build + search in this process; returns the measurements (run as a child by ``main``)."""
    import faiss

    vectors = np.load(folder / f"vectors-{n}.npy", mmap_mode="r")
    queries = np.load(folder / "queries.npy")
    truth = np.load(folder / f"truth-{n}.npy")
    ids = [str(i) for i in range(n)]
    from embedkit.index.faiss_index import Index  # imported by both sides, so neither pays it in its timings

    rss_before = peak_rss_mib()
    begun = time.perf_counter()
    if implementation == "embedkit":
        index = Index.build(
            vectors,
            ids,
            factory,
            train_size=TRAIN_SIZE,
            seed=0,
            nprobe=params.get("nprobe"),
            ef_search=params.get("efSearch"),
        )

        def search() -> list[list[str]]:
            return index.search(queries, 10)[1]
    else:
        raw = faiss.index_factory(DIM, factory, faiss.METRIC_INNER_PRODUCT)
        if not raw.is_trained:
            sample = vectors
            if n > TRAIN_SIZE:
                sample = vectors[np.sort(np.random.default_rng(0).choice(n, TRAIN_SIZE, replace=False))]
            raw.train(np.ascontiguousarray(sample))
        for start in range(0, n, 100_000):
            raw.add(np.ascontiguousarray(vectors[start : start + 100_000]))
        for name, value in params.items():
            faiss.ParameterSpace().set_index_parameter(raw, name, value)

        def search() -> list[list[str]]:  # the same id mapping embedkit does, for a like-for-like timing
            _, labels = raw.search(queries, 10)
            return [[ids[j] for j in row if j >= 0] for row in labels]

    build_s = time.perf_counter() - begun
    timings, found = [], None
    for _ in range(3):
        begun = time.perf_counter()
        found = search()
        timings.append(time.perf_counter() - begun)
    recall = np.mean([len({int(h) for h in a} & set(b.tolist())) / 10 for a, b in zip(found, truth)])
    peak = peak_rss_mib()
    return {
        "build_s": round(build_s, 2),
        "qps": round(QUERIES / min(timings), 1),
        "recall_at_10": round(float(recall), 4),
        "peak_rss_gib": round(peak / 1024, 3),
        "rss_before_build_gib": round(rss_before / 1024, 3),
    }


def budget_worker(folder: Path, n: int, budget: str) -> dict:
    """Choose and build the index for ``budget`` on the synthetic vectors (as ``embedkit index --max-memory``)."""
    from embedkit.index.budget import parse_size
    from embedkit.index.choose import BudgetSettings, choose_index
    from embedkit.index.faiss_helpers import BuildSettings
    from embedkit.index.vectors import Vectors

    vectors = Vectors.of(np.load(folder / f"vectors-{n}.npy", mmap_mode="r"), [str(i) for i in range(n)])
    begun = time.perf_counter()
    index = choose_index(vectors, BuildSettings(train_size=TRAIN_SIZE), BudgetSettings(parse_size(budget)))
    build_s = time.perf_counter() - begun
    path = index.save(folder / f"budget-{n}-{budget}", overwrite=True)
    record = index.meta["memory_budget"]
    return {"path": str(path), "build_s": round(build_s, 1), "chosen": record["chosen"], "record": record}


def budget_search_worker(folder: Path, n: int, path: str) -> dict:
    """Load a chosen index in this fresh process and search the queries: its peak memory is what serving takes."""
    from embedkit.index.faiss_index import Index

    queries = np.load(folder / "queries.npy")
    truth = np.load(folder / f"truth-{n}.npy")
    before = peak_rss_mib()  # the interpreter, numpy, FAISS and the queries: what the budget does not count
    index = Index.load(path)
    timings, found = [], None
    for _ in range(3):
        begun = time.perf_counter()
        _, found = index.search_rows(queries, 10)
        timings.append(time.perf_counter() - begun)
    recall = np.mean([len(set(a.tolist()) & set(b.tolist())) / 10 for a, b in zip(found, truth)])
    return {
        "qps": round(QUERIES / min(timings), 1),
        "recall_at_10": round(float(recall), 4),
        "peak_rss_gib": round(peak_rss_mib() / 1024, 3),
        "rss_before_load_gib": round(before / 1024, 3),
        "index_peak_gib": round((peak_rss_mib() - before) / 1024, 3),
        "search_params": index.search_params,
    }


def _child(folder: Path, job: dict) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--output", str(folder), "--worker", json.dumps(job)], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"{job} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def budget_rows(folder: Path, sizes: list[int], budgets: list[str]) -> list[dict]:
    """For each size and budget: the choice (in one child process), then a fresh child that loads and searches it."""
    rows = []
    for n in sizes:
        prepare(folder, n)
        for budget in budgets:
            chosen = _child(folder, {"mode": "budget", "n": n, "budget": budget})
            served = _child(folder, {"mode": "budget-search", "n": n, "path": chosen["path"]})
            index_bytes = sum(p.stat().st_size for p in Path(chosen["path"]).iterdir() if p.name.startswith("index"))
            row = {"n": n, "max_memory": budget, "chosen": chosen["chosen"], "build_s": chosen["build_s"]}
            row |= {**served, "index_file_bytes": index_bytes, "choice": chosen["record"]}
            rows.append(row)
            print(
                f"{n:>9} {budget:>8} -> {row['chosen']:<28} recall@10 {row['recall_at_10']:.4f}  qps {row['qps']:>9.1f}"
                f"  peak RSS {row['peak_rss_gib']:.3f} GiB  index file {index_bytes / 2**30:.3f} GiB",
                flush=True,
            )
    return rows


def scifact_flat(rounds: int = 5) -> dict:
    """Flat search of SciFact's 300 test queries over its 5,183 cached corpus vectors: embedkit vs raw FAISS."""
    import faiss

    from embedkit import evaluate, load_dataset, load_model
    from embedkit.index.faiss_index import Index

    model = load_model(device="cpu")
    data = load_dataset("scifact")
    # the test suite's cache of the same embeddings when present (.cache/embeddings), else embedkit's default
    cache = Path(__file__).resolve().parents[1] / ".cache" / "embeddings"
    folder = evaluate(model, data, "test", cache_dir=cache if cache.is_dir() else None)["embeddings_cache"]["path"]
    from embedkit.encode.folder import EmbeddingsFolder

    emb = EmbeddingsFolder.open(folder)
    vectors, ids = emb.embeddings(), emb.ids()
    queries = model.encode_queries(list(data.split_queries("test").values()))
    queries = np.tile(queries, (10, 1))  # 3,000 query rows, so one timing is long enough to read
    ours = Index.build(vectors, ids, "Flat")
    raw = faiss.IndexFlatIP(vectors.shape[1])
    raw.add(vectors)
    t_ours, t_raw = [], []
    for _ in range(rounds):
        begun = time.perf_counter()
        ours.search(queries, 10)
        t_ours.append(time.perf_counter() - begun)
        begun = time.perf_counter()
        _, labels = raw.search(queries, 10)
        _ = [[ids[j] for j in row] for row in labels]
        t_raw.append(time.perf_counter() - begun)
    return {
        "queries": len(queries),
        "embedkit_qps": round(len(queries) / min(t_ours), 1),
        "faiss_qps": round(len(queries) / min(t_raw), 1),
        "ratio": round(min(t_raw) / min(t_ours), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--output", default="runs/bench-index")
    parser.add_argument("--scifact", action="store_true")
    parser.add_argument("--max-memory", help="Comma-separated budgets: benchmark the index each one chooses.")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = Path(args.output)
    if args.worker:
        job = json.loads(args.worker)
        if job.get("mode") == "budget":
            print(json.dumps(budget_worker(folder, job["n"], job["budget"])))
        elif job.get("mode") == "budget-search":
            print(json.dumps(budget_search_worker(folder, job["n"], job["path"])))
        else:
            print(json.dumps(worker(folder, job["n"], job["factory"], job["params"], job["implementation"])))
        return
    if args.max_memory:
        sizes, budgets = [int(s) for s in args.sizes.split(",")], args.max_memory.split(",")
        rows = budget_rows(folder, sizes, budgets)
        result = {"budget_rows": rows, "machine": platform.processor() or platform.machine(), "queries": QUERIES}
        (folder / "result.json").write_text(json.dumps(result, indent=2))
        return
    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        prepare(folder, n)
        for factory, params in FACTORIES[n].items():
            row = {"n": n, "factory": factory, "params": params}
            for implementation in ("faiss", "embedkit"):
                job = json.dumps({"n": n, "factory": factory, "params": params, "implementation": implementation})
                done = subprocess.run(
                    [sys.executable, __file__, "--output", str(folder), "--worker", job], capture_output=True, text=True
                )
                if done.returncode != 0:
                    raise SystemExit(f"{implementation} {factory} at {n} failed:\n{done.stderr[-3000:]}")
                row[implementation] = json.loads(done.stdout.strip().splitlines()[-1])
            row["qps_ratio"] = round(row["embedkit"]["qps"] / row["faiss"]["qps"], 3)
            row["build_ratio"] = round(row["embedkit"]["build_s"] / max(row["faiss"]["build_s"], 1e-9), 3)
            rows.append(row)
            e, f = row["embedkit"], row["faiss"]
            print(
                f"{n:>9} {factory:<20} build {e['build_s']:>8.2f}/{f['build_s']:<8.2f} s  "
                f"qps {e['qps']:>9.1f}/{f['qps']:<9.1f} ({row['qps_ratio']:.2f})  recall@10 {e['recall_at_10']:.4f}/"
                f"{f['recall_at_10']:.4f}  peak RSS {e['peak_rss_gib']:.2f}/{f['peak_rss_gib']:.2f} GiB",
                flush=True,
            )
    result = {"rows": rows, "machine": platform.processor() or platform.machine(), "queries": QUERIES}
    if args.scifact:
        result["scifact_flat"] = scifact_flat()
        print("SciFact Flat:", result["scifact_flat"])
    (folder / "result.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
