"""Encode the same SciFact texts with embedkit and with sentence-transformers at its best, alternating, on the CPU.

    python benchmarks/encode.py                                   # 1,000 documents, 3 rounds, every encoder
    python benchmarks/encode.py --docs 1000 --rounds 3 --ndcg --output benchmarks/results/encode.json
    python benchmarks/encode.py --docs 100 --rounds 1 --encoders torch-bf16,sentence-transformers-bf16
    python benchmarks/encode.py --texts train-queries --docs all  # short texts: SciFact's 809 training queries
    python benchmarks/encode.py --max-tokens 64                   # documents cut to 64 word pieces
    python benchmarks/encode.py --load 2 --threads 1              # under 2 busy processes, every row on one thread
    python benchmarks/encode.py --executor ray --docs 1000         # Ray executor vs one process (encode_executors.py)
    python benchmarks/encode.py --device cuda --docs all           # on a GPU: the torch rows and the peer's

The peer, as its users can run it at its best:
- ``sentence-transformers`` (float32) and ``sentence-transformers-bf16`` (its ``encode`` inside
  ``torch.autocast("cpu", bfloat16)``), in this process;
- ``sentence-transformers-onnx`` and ``sentence-transformers-openvino`` (``SentenceTransformer(backend=...)``, which
  exports the model itself on load): their extras pin an older transformers than embedkit's, so each runs from a side
  virtualenv under ``.cache/peer-venvs/`` (built on first use: ``sentence-transformers[onnx]`` / ``[openvino]``
  with torch pinned to embedkit's) in a process of its own (``encode_peer.py``), alternating with
  the rows of this process. A side virtualenv that cannot be built is reported with pip's reason and left out.
Every sentence-transformers row runs at its best batch size: before the timed rounds it encodes the first
``--st-sweep-docs`` texts once per size in ``--st-batch-sizes`` (after one untimed call) and keeps the fastest.

embedkit's rows are ``load_model`` as users call it: ``torch`` (the default, float32), ``torch-bf16``
(``dtype="bfloat16"``: sentence-transformers' modules under the same autocast, in embedkit's length-sorted
token-budget batches), and the opt-in engines ``torch-int8``, ``onnx``, ``onnx-int8``, ``openvino`` (float32) and
``openvino-bf16``.

All rows are loaded first and then timed in rounds, each round running every row once (the order rotated per round),
so a busy machine slows them alike. ``--threads`` sets the threads of every row alike (torch's, ONNX Runtime's,
OpenVINO's); under ``--load`` give ``--threads 1`` so no row keeps two threads contending with the busy processes.

Printed per row: the median texts/s, its ratio to each peer row, and the min/mean cosine of its embeddings to
sentence-transformers' float32 ones and to the peer row of the same precision. ``--ndcg`` adds nDCG@10 and recall@100
on the test split for embedkit's default rows (``torch``, ``torch-bf16``): the whole corpus and the test queries,
exact inner-product search, pytrec_eval through embedkit's metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch
from encode_conditions import TEXT_KINDS, benchmark_texts, cpu_load
from encode_report import cosine_stats, ndcg_on_test, print_table
from sentence_transformers import SentenceTransformer

from embedkit import load_dataset, load_model
from embedkit.errors import EmbedkitError
from embedkit.models.device import autocast, pick_device
from embedkit.models.reference import default_model_path

REPO = Path(__file__).resolve().parents[1]
PEER_VENVS = REPO / ".cache" / "peer-venvs"
TORCH_PIN = "torch==2.13.0"
REFERENCE = "sentence-transformers"
# the peer's rows -> (where it runs, its precision)
ST_ROWS: dict[str, str] = {REFERENCE: "float32", "sentence-transformers-bf16": "bfloat16"}
ST_PEERS: dict[str, str] = {"sentence-transformers-onnx": "onnx", "sentence-transformers-openvino": "openvino"}
# embedkit's rows -> load_model arguments
EMBEDKIT_ROWS: dict[str, dict[str, str]] = {
    "torch": {},
    "torch-bf16": {"dtype": "bfloat16"},
    "torch-int8": {"backend": "torch-int8"},
    "onnx": {"backend": "onnx"},
    "onnx-int8": {"backend": "onnx-int8"},
    "openvino": {"backend": "openvino"},
    "openvino-bf16": {"backend": "openvino", "dtype": "bfloat16"},
}
DEFAULT_ROWS = ("torch", "torch-bf16")  # what --ndcg scores
GPU_ROWS = (*ST_ROWS, "torch", "torch-bf16")
GPU_SWEEP = "32,64,128,256,512"
Encoder = Callable[[list[str]], np.ndarray]


class StEncoder:
    """sentence-transformers' own ``encode`` in this process; ``batch_size`` is set by the sweep."""

    def __init__(self, dtype: str, batch_size: int, device: str) -> None:
        self.st = SentenceTransformer(str(default_model_path()), device=device)
        self.dtype, self.device, self.batch_size = dtype, device, batch_size

    def __call__(self, texts: list[str]) -> np.ndarray:
        with autocast(self.device, self.dtype):  # embedkit's autocast helper: both libraries under one context
            embeddings = self.st.encode(texts, batch_size=self.batch_size, convert_to_numpy=True)
        return np.asarray(embeddings, dtype=np.float32)


def peer_venv(backend: str) -> Path:
    """The side virtualenv's python for ``sentence-transformers[backend]``, built once; EmbedkitError names what
    pip refused."""
    folder = PEER_VENVS / backend
    python = folder / "bin" / "python"
    if (folder / ".installed").is_file():
        return python
    print(f"building the {backend} peer's virtualenv in {folder} (once)", flush=True)
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(folder)],
        [str(python), "-m", "pip", "install", "--quiet", TORCH_PIN],
        # torch pinned again in the same resolve: an extra that needs torchvision would otherwise upgrade it
        [str(python), "-m", "pip", "install", "--quiet", TORCH_PIN, f"sentence-transformers[{backend}]"],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            reason = [line for line in done.stderr.splitlines() if "ERROR" in line or "conflict" in line.lower()]
            raise EmbedkitError(f"pip could not install the {backend} peer: {' '.join(reason[-3:]) or done.stderr}")
    # optimum-intel requires torchvision, and PyPI's torchvision is built for CUDA torch: its ops fail to load beside
    # the CPU torch, and transformers then fails to import. A text model never uses it, so it goes.
    if subprocess.run([str(python), "-c", "import torchvision"], capture_output=True).returncode != 0:
        subprocess.run([str(python), "-m", "pip", "uninstall", "--yes", "--quiet", "torchvision"], check=True)
    (folder / ".installed").write_text("")
    return python


class PeerProcess:
    """sentence-transformers with an engine backend, in its own virtualenv and process (``encode_peer.py``).

    The texts are handed over once; each call encodes the first ``len(texts)`` of them there and returns the
    embeddings. ``seconds`` is the peer's own wall time of ``encode``, without the hand-over."""

    def __init__(self, backend: str, texts: list[str], batch_size: int, threads: int | None, tmp: Path) -> None:
        python = peer_venv(backend)
        self.texts_file = tmp / f"texts-{backend}.json"
        self.texts_file.write_text(json.dumps(texts))
        self.out = tmp / f"peer-{backend}.npy"
        command = [str(python), str(Path(__file__).with_name("encode_peer.py")), "--backend", backend]
        command += ["--model", str(default_model_path()), "--texts", str(self.texts_file)]
        command += ["--threads", str(threads)] if threads else []
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self._read()
        self.info = {key: ready[key] for key in ("load_s", "versions", "precision")}
        self.batch_size, self.seconds = batch_size, 0.0

    def _read(self) -> dict[str, Any]:
        for line in self.process.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise EmbedkitError(f"the peer process ended (exit {self.process.wait()})")

    def __call__(self, texts: list[str]) -> np.ndarray:
        request = {"count": len(texts), "batch_size": self.batch_size, "out": str(self.out)}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        self.seconds = self._read()["seconds"]
        return np.load(self.out)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def _precision(name: str, peers: dict[str, PeerProcess]) -> str:
    if name in ST_ROWS:
        return ST_ROWS[name]
    if name in peers:
        hint = (peers[name].info.get("precision") or "").lower()  # e.g. "<Type: 'bfloat16'>" from OpenVINO
        return "bfloat16" if "bf16" in hint or "bfloat16" in hint else "float32"
    return EMBEDKIT_ROWS[name].get("dtype", "float32")


def sweep_batch_sizes(encoder: StEncoder | PeerProcess, texts: list[str], sizes: list[int]) -> dict[str, float]:
    """Texts/s of one encode of ``texts`` per batch size, after one untimed call; leaves ``encoder`` at the best."""
    encoder.batch_size = sizes[0]
    encoder(texts[: sizes[0]])
    rates: dict[str, float] = {}
    for size in sizes:
        encoder.batch_size = size
        start = time.perf_counter()
        encoder(texts)
        seconds = encoder.seconds if isinstance(encoder, PeerProcess) else time.perf_counter() - start
        rates[str(size)] = round(len(texts) / seconds, 2)
    encoder.batch_size = int(max(rates, key=rates.__getitem__))
    return rates


def _rounds(names: list[str], encoders: dict[str, Encoder], texts: list[str], rounds: int):
    """Texts/s of every row per round, the order rotated each round; and each row's last embeddings."""
    rates: dict[str, list[float]] = {name: [] for name in names}
    embedded: dict[str, np.ndarray] = {}
    for number in range(rounds):
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            encoder = encoders[name]
            start = time.perf_counter()
            embedded[name] = encoder(texts)
            seconds = encoder.seconds if isinstance(encoder, PeerProcess) else time.perf_counter() - start
            rates[name].append(len(texts) / seconds)
        print(f"round {number + 1}: " + ", ".join(f"{n} {rates[n][-1]:.1f}" for n in names) + " texts/s", flush=True)
    return rates, embedded


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="scifact", help="BEIR dataset name or folder")
    parser.add_argument("--docs", default="1000", help="texts timed: a number or 'all'")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--encoders", help="comma-separated rows (default: every one that runs on --device)")
    parser.add_argument(
        "--st-batch-sizes", help=f"the peer's batch sizes to sweep (8,16,32,64,128; {GPU_SWEEP} on CUDA)"
    )
    parser.add_argument("--st-sweep-docs", type=int, default=200, help="texts the batch-size sweep encodes")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    parser.add_argument("--threads", type=int, help="threads of every row (default: torch's default)")
    parser.add_argument("--ndcg", action="store_true", help="nDCG@10 on the test split for embedkit's default rows")
    parser.add_argument("--output", type=Path, help="JSON file for the results")
    parser.add_argument("--texts", choices=TEXT_KINDS, default="docs", help="what is timed (nDCG stays SciFact's)")
    parser.add_argument("--max-tokens", type=int, help="cut every timed text to this many word pieces")
    parser.add_argument("--load", type=int, default=0, help="busy-loop processes running through the timed rounds")
    parser.add_argument("--executor", choices=["ray"], help="compare the Ray executor with this process instead")
    parser.add_argument("--shard-size", type=int, default=100, help="with --executor: documents per shard file")
    parser.add_argument("--ray-workers", type=int, default=2, help="with --executor: actors of the widest Ray row")
    args = parser.parse_args()
    if args.docs != "all" and not args.docs.isdigit():
        parser.error("--docs takes a number or 'all'")
    try:
        args.device = pick_device(args.device)
    except EmbedkitError as error:
        parser.error(f"--device: {error}")
    args.on_gpu = torch.device(args.device).type == "cuda"
    sizes = (args.st_batch_sizes or (GPU_SWEEP if args.on_gpu else "8,16,32,64,128")).split(",")
    if not all(size.strip().isdigit() and int(size) > 0 for size in sizes):
        parser.error("--st-batch-sizes takes comma-separated positive numbers")
    args.st_sizes = [int(size) for size in sizes]
    if args.load < 0 or (args.max_tokens is not None and args.max_tokens < 1) or args.st_sweep_docs < 1:
        parser.error("--load takes 0 or more, --max-tokens and --st-sweep-docs a positive number")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads takes a positive number")
    known = GPU_ROWS if args.on_gpu else (*ST_ROWS, *ST_PEERS, *EMBEDKIT_ROWS)
    args.names = [name.strip() for name in (args.encoders or ",".join(known)).split(",") if name.strip()]
    if unknown := [name for name in args.names if name not in known]:
        parser.error(f"unknown encoders {unknown} on {args.device} (choose from {', '.join(known)})")
    return args


def _load(args: argparse.Namespace, texts: list[str], tmp: Path) -> tuple[dict[str, Any], dict[str, Any], dict]:
    """Every row's encoder, embedkit's models (for settings and queries), and the peer rows left out with why."""
    encoders: dict[str, Any] = {}
    models: dict[str, Any] = {}
    missing: dict[str, str] = {}
    for name in args.names:
        start = time.perf_counter()
        if name in ST_ROWS:
            encoders[name] = StEncoder(ST_ROWS[name], args.st_sizes[0], args.device)
        elif name in ST_PEERS:
            try:
                encoders[name] = PeerProcess(ST_PEERS[name], texts, args.st_sizes[0], args.threads, tmp)
            except EmbedkitError as error:
                missing[name] = str(error)
                print(f"left out {name}: {error}")
                continue
        else:
            model = load_model(device=args.device, **EMBEDKIT_ROWS[name])
            encoders[name] = lambda texts, model=model: model.encode(texts, show_progress=False)
            models[name] = model
        print(f"loaded {name} in {time.perf_counter() - start:.1f} s", flush=True)
    return encoders, models, missing


def _row(name: str, rates, embedded, encoders, models, peers) -> dict[str, Any]:
    median = statistics.median(rates[name])
    precision = _precision(name, peers)
    row: dict[str, Any] = {
        "precision": precision,
        "docs_per_s": [round(rate, 2) for rate in rates[name]],
        "median_docs_per_s": round(median, 2),
        "ratio_to": {
            peer: round(median / statistics.median(rates[peer]), 3)
            for peer in [*ST_ROWS, *ST_PEERS]
            if peer in rates and peer != name
        },
    }
    if REFERENCE in embedded and name != REFERENCE:
        row["cosine_vs_st_fp32"] = cosine_stats(embedded[name], embedded[REFERENCE])
    same = next((p for p, dtype in ST_ROWS.items() if dtype == precision), None)
    if same in embedded and same not in (name, REFERENCE):
        row["cosine_vs_st_same_precision"] = cosine_stats(embedded[name], embedded[same])
    if hasattr(encoders[name], "batch_size"):
        row["st_batch_size"] = encoders[name].batch_size
    if name in peers:
        row["peer"] = peers[name].info
    if name in models:
        row["settings"] = models[name].settings
    return row


def main() -> None:
    args = _arguments()
    if args.executor:
        from encode_executors import run_executors

        docs = None if args.docs == "all" else int(args.docs)
        run_executors(args.dataset, docs, args.rounds, args.shard_size, args.ray_workers, args.output)
        return
    if args.threads:
        torch.set_num_threads(args.threads)  # this benchmark's own process; the peers get --threads too
    texts = benchmark_texts(args.dataset, args.texts, args.docs, args.max_tokens)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            encoders, models, missing = _load(args, texts, Path(tmp))
        except EmbedkitError as error:
            sys.exit(f"cannot load an encoder: {error}")
        names = [name for name in args.names if name in encoders]
        peers = {name: encoder for name, encoder in encoders.items() if isinstance(encoder, PeerProcess)}
        machine = {
            "device": torch.cuda.get_device_name(args.device) if args.on_gpu else "cpu",
            "processor": _cpu_name(),
            "cpus": os.cpu_count(),
            "threads": torch.get_num_threads(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "load_processes": args.load,
        }
        cut = f", cut to {args.max_tokens} word pieces" if args.max_tokens else ""
        print(f"{len(texts)} {args.dataset} {args.texts}{cut}, {args.rounds} rounds; {machine}", flush=True)
        with cpu_load(args.load, seconds=3600):
            sweeps = {}
            for name in names:
                if hasattr(encoders[name], "batch_size") and len(args.st_sizes) > 1:
                    rates = sweep_batch_sizes(encoders[name], texts[: args.st_sweep_docs], args.st_sizes)
                    sweeps[name] = {"texts": args.st_sweep_docs, "docs_per_s": rates, "best": encoders[name].batch_size}
                    print(f"{name} batch sweep: {rates} texts/s -> batch {encoders[name].batch_size}", flush=True)
            rates, embedded = _rounds(names, encoders, texts, args.rounds)
        results = {name: _row(name, rates, embedded, encoders, models, peers) for name in names}
        for peer in peers.values():
            peer.close()
    if args.ndcg:
        data = load_dataset(args.dataset)
        for name in [name for name in DEFAULT_ROWS if name in models]:
            start = time.perf_counter()
            results[name].update(ndcg_on_test(encoders[name], models[name], data, None))
            print(f"nDCG@10 {name}: {results[name]['ndcg_at_10']:.4f} ({time.perf_counter() - start:.0f} s)")
    print()
    print_table(results)
    if args.output:
        from embedkit.storage import write_json

        record = {
            "command": " ".join(["python", "benchmarks/encode.py", *sys.argv[1:]]),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "dataset": args.dataset,
            "texts": args.texts,
            "max_tokens": args.max_tokens,
            "count": len(texts),
            "machine": machine,
            "rounds": args.rounds,
            "st_batch_sweep": sweeps,
            "left_out": missing,
            "encoders": results,
        }
        write_json(args.output, record)
        print(f"written to {args.output}")


def _cpu_name() -> str:
    """The CPU's model name (Linux), else what ``platform`` says."""
    info = Path("/proc/cpuinfo")
    if info.is_file():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    main()
