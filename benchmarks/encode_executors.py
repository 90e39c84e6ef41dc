"""``benchmarks/encode.py --executor ray``: the same corpus encoded into an embeddings folder in this process and
through the Ray executor on a local one-node cluster, alternating, medians: what Ray costs on one machine.

Rows: ``local`` (``encode_to_folder`` in this process, torch on all cores), ``ray-1`` (one actor holding all cores
but the read tasks' share) and ``ray-N`` (``--ray-workers`` actors splitting them). Each run writes a fresh folder
(nothing cached) and is timed end to end: for Ray that includes starting the actors and loading the model in each,
the driver's tokenizing tasks and the object store, but not starting the cluster (once, before the rounds, as a
user's long-lived cluster would be). Every folder's manifest is compared with the local one (equal bytes when the
thread counts match; otherwise the cosine of the vectors is reported).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from embedkit import EmbeddingsFolder, encode_to_folder, load_dataset, load_model
from embedkit.encode.ray_executor import RayExecutor, RaySettings, import_ray


def _run(model: Any, corpus: Any, folder: Path, shard_size: int, executor: RayExecutor | None) -> float:
    start = time.perf_counter()
    encode_to_folder(model, corpus, folder, shard_size=shard_size, show_progress=False, executor=executor)
    return time.perf_counter() - start


def run_executors(dataset: str, docs: int | None, rounds: int, shard_size: int, ray_workers: int, output: Path | None):
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    data = load_dataset(dataset)
    corpus = data.corpus if docs is None else data.corpus.select(range(min(docs, len(data.corpus))))
    model = load_model(device="cpu")
    ray = import_ray()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    rows: dict[str, RayExecutor | None] = {
        "local": None,
        "ray-1": RayExecutor(RaySettings(num_workers=1)),
        f"ray-{ray_workers}": RayExecutor(RaySettings(num_workers=ray_workers)),
    }
    names = list(rows)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    vectors: dict[str, np.ndarray] = {}
    machine = {"cpus": os.cpu_count(), "threads": torch.get_num_threads(), "python": platform.python_version()}
    print(f"{len(corpus)} {dataset} documents, shard size {shard_size}, {rounds} rounds; {machine}")
    with tempfile.TemporaryDirectory() as tmp:
        for round_number in range(rounds):
            shift = round_number % len(names)
            for name in names[shift:] + names[:shift]:
                folder = Path(tmp) / f"{name}-{round_number}"
                seconds[name].append(_run(model, corpus, folder, shard_size, rows[name]))
                vectors[name] = EmbeddingsFolder.open(folder).embeddings()
            print(
                f"round {round_number + 1}: "
                + ", ".join(f"{n} {len(corpus) / seconds[n][-1]:.1f}" for n in names)
                + " docs/s"
            )
    ray.shutdown()
    local = statistics.median(seconds["local"])
    results: dict[str, Any] = {"docs": len(corpus), "shard_size": shard_size, "machine": machine, "rows": {}}
    for name in names:
        median = statistics.median(seconds[name])
        cosine = np.sum(vectors[name] * vectors["local"], axis=1)
        results["rows"][name] = {
            "seconds": [round(s, 2) for s in seconds[name]],
            "median_docs_per_s": round(len(corpus) / median, 2),
            "ratio_vs_local": round(local / median, 3),
            "identical_to_local": bool(np.array_equal(vectors[name], vectors["local"])),
            "min_cosine_to_local": round(float(cosine.min()), 6),
        }
    print("| executor | docs/s (median) | vs local | identical | min cosine |")
    print("|---|---|---|---|---|")
    for name, row in results["rows"].items():
        print(
            f"| {name} | {row['median_docs_per_s']} | {row['ratio_vs_local']}x | {row['identical_to_local']} | "
            f"{row['min_cosine_to_local']} |"
        )
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(results, indent=2) + "\n")
