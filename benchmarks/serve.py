"""``embedkit serve`` under load on loopback, against the same searches made in-process.

    python benchmarks/serve.py [--output runs/bench-serve] [--requests 600] [--concurrency 1,8,32] [--threads 2]

Builds (once) a Flat index of SciFact's 5,183 documents from the default model's embeddings (the embeddings cache,
``--cache-dir``, encoding the corpus only if it is not there yet), starts ``python -m embedkit serve`` on it as a
subprocess on a free loopback port, and sends ``--requests`` POST /search requests (SciFact's test queries in turn,
one query per request, k=10) from N concurrent httpx async clients for each N of ``--concurrency``. Records queries/s
(requests over the wall time of the level), p50/p99 latency per request and how the server batched them (its
/health ``batching`` counters, before and after the level).

Then, with the server stopped so nothing competes for the CPU, the same searches in this process:
``encode_queries`` + ``Index.search`` one query at a time (latency per query) and all queries batched (64 per call).
The first level's answers are checked against the in-process ones (same ids per query). Writes ``result.json``
and prints a markdown table. ``--requests 20 --concurrency 1,4`` is a smoke test, not a measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx
import numpy as np

from embedkit.environment import library_versions
from embedkit.storage import write_json

K = 10
REPO = Path(__file__).resolve().parents[1]


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)), "mean_ms": float(ms.mean())}


def build_index(dataset: str, cache_dir: Path, folder: Path, device: str) -> Path:
    """A Flat index of the corpus from the default model's cached embeddings (written once, reused after)."""
    if (folder / "meta.json").is_file():
        return folder
    from embedkit import load_dataset, load_model
    from embedkit.encode.cache import cached_corpus_embeddings
    from embedkit.index.faiss_helpers import BuildSettings
    from embedkit.index.faiss_index import Index

    model = load_model(device=device)
    embeddings = cached_corpus_embeddings(model, load_dataset(dataset), cache_dir)
    Index.from_vectors(embeddings, BuildSettings("Flat", "ip", use_gpu=False)).save(folder)
    return folder


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(index: Path, dataset: str, args: argparse.Namespace, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [sys.executable, "-m", "embedkit", "serve", "-i", str(index), "-d", dataset, "--port", str(port)]
    command += ["--device", args.device, "--max-batch", str(args.max_batch), "--max-wait-ms", str(args.max_wait_ms)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        if process.poll() is not None:
            raise SystemExit(f"embedkit serve exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise SystemExit(f"embedkit serve never answered /health:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


async def load_level(url: str, queries: list[str], requests: int, clients: int) -> dict[str, Any]:
    """``requests`` searches from ``clients`` concurrent clients, each taking the next query when it is free."""
    latencies: list[float] = []
    answers: dict[int, list[str]] = {}
    next_request = iter(range(requests))
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        for query in queries[: min(4, len(queries))]:  # warm up connections and the server's first batch
            (await client.post("/search", json={"queries": [query], "k": K})).raise_for_status()
        before = (await client.get("/health")).json()["batching"]

        async def worker() -> None:
            for number in next_request:
                query = queries[number % len(queries)]
                sent = time.perf_counter()
                response = await client.post("/search", json={"queries": [query], "k": K})
                latencies.append(time.perf_counter() - sent)
                response.raise_for_status()
                answers[number] = [hit["id"] for hit in response.json()["results"][0]["hits"]]

        begun = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        wall = time.perf_counter() - begun
        after = (await client.get("/health")).json()["batching"]
    batches = after["batches"] - before["batches"]
    return {
        "clients": clients,
        "requests": requests,
        "wall_s": wall,
        "qps": requests / wall,
        **percentiles(latencies),
        "batches": batches,
        "mean_requests_per_batch": (after["requests"] - before["requests"]) / max(batches, 1),
        "largest_batch_requests": after["largest_batch_requests"],
        "answers": answers,
    }


def in_process(index_path: Path, queries: list[str], requests: int, device: str) -> dict[str, Any]:
    """The same searches without HTTP: one query per call, then all queries in batches of 64."""
    from embedkit.index.faiss_index import Index
    from embedkit.models.loading import load_model_from_settings

    index = Index.load(index_path, use_gpu=False)
    model = load_model_from_settings(index.meta["model"], device=device)
    for query in queries[:4]:
        index.search(model.encode_queries([query]), K)
    latencies, ids = [], {}
    begun = time.perf_counter()
    for number in range(requests):
        query = queries[number % len(queries)]
        sent = time.perf_counter()
        _, hits = index.search(model.encode_queries([query]), K)
        latencies.append(time.perf_counter() - sent)
        ids[number] = hits[0]
    one_wall = time.perf_counter() - begun
    texts = [queries[number % len(queries)] for number in range(requests)]
    begun = time.perf_counter()
    for start in range(0, len(texts), 64):
        index.search(model.encode_queries(texts[start : start + 64]), K)
    batched_wall = time.perf_counter() - begun
    return {
        "one_at_a_time": {
            "requests": requests,
            "wall_s": one_wall,
            "qps": requests / one_wall,
            **percentiles(latencies),
        },
        "batched_64": {"requests": requests, "wall_s": batched_wall, "qps": requests / batched_wall},
        "ids": ids,
    }


def table(result: dict[str, Any]) -> str:
    rows = ["| path | clients | QPS | p50 ms | p99 ms | requests / batch |", "|---|---:|---:|---:|---:|---:|"]
    for level in result["server"]:
        rows.append(
            f"| HTTP /search | {level['clients']} | {level['qps']:.1f} | {level['p50_ms']:.1f} | "
            f"{level['p99_ms']:.1f} | {level['mean_requests_per_batch']:.2f} |"
        )
    one, batched = result["in_process"]["one_at_a_time"], result["in_process"]["batched_64"]
    rows.append(
        f"| in-process, 1 query per call | 1 | {one['qps']:.1f} | {one['p50_ms']:.1f} | {one['p99_ms']:.1f} | |"
    )
    rows.append(f"| in-process, 64 queries per call | 1 | {batched['qps']:.1f} | | | |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", default="runs/bench-serve")
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--cache-dir", default=str(REPO / ".cache" / "embeddings"), help="embeddings cache")
    parser.add_argument("--requests", type=int, default=600, help="requests per concurrency level")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--threads", type=int, default=2, help="torch/OpenMP threads of the server and in-process")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    args = parser.parse_args()
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    index = build_index(args.dataset, Path(args.cache_dir), output / "index-flat", args.device)
    from embedkit import load_dataset

    queries = list(load_dataset(args.dataset).split_queries("test").values())
    levels = [int(n) for n in args.concurrency.split(",")]
    process, url = start_server(index, args.dataset, args, output / "server.log")
    try:
        server = [asyncio.run(load_level(url, queries, args.requests, n)) for n in levels]
        settings = httpx.get(url + "/health", timeout=10).json()
    finally:
        process.terminate()
        process.wait(timeout=60)
    import torch

    torch.set_num_threads(args.threads)
    local = in_process(index, queries, args.requests, args.device)
    same = all(server[0]["answers"][n] == local["ids"][n] for n in server[0]["answers"])
    for level in server:
        del level["answers"]
    del local["ids"]
    result = {
        "benchmark": "serve",
        "dataset": args.dataset,
        "queries": len(queries),
        "k": K,
        "settings": vars(args),
        "server_settings": {name: settings[name] for name in ("index", "model", "limits")},
        "server": server,
        "in_process": local,
        "server_ids_equal_in_process": same,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "versions": library_versions()},
    }
    write_json(output / "result.json", result)
    print(table(result))
    print(f"\nserver answers equal the in-process ones: {same}; result: {output / 'result.json'}")


if __name__ == "__main__":
    main()
