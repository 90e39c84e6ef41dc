"""Encode the same SciFact documents with each embedkit backend and with sentence-transformers, alternating.

    python benchmarks/encode.py                                   # 1,000 documents, 3 rounds, every backend
    python benchmarks/encode.py --docs all --rounds 1 --ndcg --output runs/bench-encode.json
    python benchmarks/encode.py --docs 100 --rounds 1 --backends torch,onnx-int8 --no-rss
    python benchmarks/encode.py --st-batch-sizes 32                # no sweep: sentence-transformers at batch 32
    python benchmarks/encode.py --executor ray --docs 1000         # Ray executor vs one process (encode_executors.py)
    python benchmarks/encode.py --load 2 --backends sentence-transformers-bf16,openvino-bf16   # under 2 busy processes
    python benchmarks/encode.py --texts train-queries --docs all   # short texts: SciFact's 809 training queries
    python benchmarks/encode.py --max-tokens 64                    # documents cut to 64 word pieces
    python benchmarks/encode.py --ndcg --static runs/minilm-static --plot benchmarks/encode_speed_ndcg.png
    python benchmarks/encode.py --device cuda --docs all              # on a GPU: the torch rows, bf16 and fp32

Encoders: sentence-transformers' own ``encode`` in two precisions, ``sentence-transformers`` (fp32: the reference)
and ``sentence-transformers-bf16`` (inside ``torch.autocast("cpu", bfloat16)``; output as float32), and embedkit's
``torch`` (fp32), ``torch-bf16`` (``backend="torch", dtype="bfloat16"``: ``models/cpu_bfloat16.py``, its products
in oneDNN's bf16 kernels on a CPU with bf16 instructions and in the fp32 kernels elsewhere), ``openvino-bf16``
(``models/openvino_backend.py``: what ``load_model(dtype="bfloat16")`` runs on a CPU where OpenVINO has bf16
kernels; elsewhere it runs ``torch-bf16``), ``torch-int8``, ``onnx`` and ``onnx-int8`` (``load_model(backend=...)``;
these three compute in float32).

sentence-transformers runs at its best batch size, not a fixed one: before the timed rounds each of its rows encodes
the first ``--st-sweep-docs`` texts (200) once per size in ``--st-batch-sizes`` (16,32,64,128; after one untimed
warm-up call) and keeps the fastest; every sweep rate goes to the JSON. One size given skips the sweep.

All are loaded in one process and timed in rounds, each round running every encoder once (the order rotated per
round), so a busy machine slows them alike. glibc's malloc thresholds are fixed before any encoder loads
(``embedkit/models/heap.py``, which embedkit's CPU encode does anyway): the setting is process-wide, so every row
runs under it and the ratios compare the encoders, not the allocator (``encode_heap.py`` measures it apart).

Printed per encoder: the median docs/s; its ratio to the sentence-transformers row of the same precision (fp32 rows
to ``sentence-transformers``, ``torch-bf16`` to ``sentence-transformers-bf16``: like for like) and, as a second
column, to ``sentence-transformers`` fp32; the min/mean cosine of its embeddings to sentence-transformers' fp32
ones, and for ``torch-bf16`` to its bf16 ones too.

Peak RSS: each encoder is loaded again in a child process of its own that encodes the same texts once; its peak
resident memory (Linux ``VmHWM``: Python, torch, the model, its activations) is reported next to the child's peak
before the model was loaded (imports and texts alone), so the difference is the encoder's own cost.

Every row also reports its useful work per second: the texts' tokens as the model sees them (truncated, with
special tokens, no padding) and the FLOPs of their unpadded forward, as a fraction of ``torch.mm``'s peak at the
row's precision on the same device, measured in this process after the rounds (``encode_report.py``).

``--device cuda``: everything above on a GPU. Only the encoders that run there are allowed (the sentence-transformers
rows, ``torch``, ``torch-bf16``; by default those four), embedkit's budget is its GPU default (65,536 padded tokens),
and the peer's sweep defaults to 32/64/128/256/512.

``--ndcg``: nDCG@10 and recall@100 on the dataset's test split per encoder: the full corpus and the test queries
encoded with that encoder (the timed embeddings are reused when ``--docs all``), exact inner-product search (a FAISS
Flat index) and embedkit's metrics (pytrec_eval). Results go to ``--output`` as JSON too.
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
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch
from encode_conditions import TEXT_KINDS, benchmark_texts, cpu_load
from encode_report import cosine_stats, matmul_peak, ndcg_on_test, plot_speed_vs_ndcg, print_table, text_work
from peak_memory import peak_rss_mib
from sentence_transformers import SentenceTransformer

from embedkit import load_dataset, load_model
from embedkit.errors import EmbedkitError
from embedkit.models import heap
from embedkit.models.device import DTYPES, autocast, pick_device
from embedkit.models.reference import default_model_path

REFERENCE = "sentence-transformers"
ST_BF16 = "sentence-transformers-bf16"
# sentence-transformers rows -> their autocast dtype
ST_ROWS: dict[str, str] = {REFERENCE: "float32", ST_BF16: "bfloat16"}
# name -> load_model arguments
BACKENDS: dict[str, dict[str, str]] = {
    "torch": {"backend": "torch", "dtype": "float32"},
    "torch-bf16": {"backend": "torch", "dtype": "bfloat16"},
    "torch-int8": {"backend": "torch-int8"},
    "onnx": {"backend": "onnx"},
    "onnx-int8": {"backend": "onnx-int8"},
    "openvino-bf16": {"backend": "openvino", "dtype": "bfloat16"},
}
GPU_ENCODERS = (*ST_ROWS, "torch", "torch-bf16")  # the rows that run on a CUDA device
GPU_SWEEP = "32,64,128,256,512"
Encoder = Callable[[list[str]], np.ndarray]


class StEncoder:
    """sentence-transformers' own ``encode``; ``batch_size`` is settable so the sweep can reuse the loaded model."""

    def __init__(self, dtype: str, batch_size: int, device: str = "cpu") -> None:
        self.st = SentenceTransformer(str(default_model_path()), device=device)
        self.dtype, self.device = dtype, device
        self.batch_size = batch_size

    def __call__(self, texts: list[str]) -> np.ndarray:
        # embedkit's own autocast helper, so the bf16 rows of both libraries run under the very same context
        with autocast(self.device, self.dtype):
            embeddings = self.st.encode(texts, batch_size=self.batch_size, convert_to_numpy=True)
        return np.asarray(embeddings, dtype=np.float32)


STATIC = "static"  # the model folder given by --static (``embedkit distill-static``), float32


def _precision(name: str) -> str:
    """An encoder's compute precision: the ONNX and int8 backends run float32 (int8 only in their quantised matmuls)."""
    if name == STATIC:
        return "float32"
    return ST_ROWS[name] if name in ST_ROWS else BACKENDS[name].get("dtype", "float32")


def _st_peer(name: str) -> str:
    """The sentence-transformers row of the same precision as ``name``: the like-for-like comparison."""
    return next(st for st, dtype in ST_ROWS.items() if dtype == _precision(name))


def _encoders(
    names: list[str], st_batch_size: int, static: Path | None = None, device: str = "cpu"
) -> tuple[dict[str, Encoder], dict[str, Any]]:
    """Load every encoder; returns their encode functions and the embedkit models (for settings and queries)."""
    encoders: dict[str, Encoder] = {}
    models: dict[str, Any] = {}
    for name in names:
        if name in ST_ROWS:
            encoders[name] = StEncoder(ST_ROWS[name], st_batch_size, device)
            continue
        start = time.perf_counter()
        model = load_model(static, device=device) if name == STATIC else load_model(device=device, **BACKENDS[name])
        print(f"loaded {name} in {time.perf_counter() - start:.1f} s (an ONNX export is cached after its first run)")
        encoders[name] = lambda texts, model=model: model.encode(texts, show_progress=False)
        models[name] = model
    return encoders, models


def sweep_batch_sizes(encoder: StEncoder, texts: list[str], sizes: list[int]) -> dict[str, float]:
    """Docs/s of one encode of ``texts`` per batch size; leaves ``encoder`` at the fastest size.

    One untimed call first, so the first size timed does not also pay for the first call's one-off setup.
    """
    encoder.batch_size = sizes[0]
    encoder(texts[: sizes[0]])
    rates: dict[str, float] = {}
    for size in sizes:
        encoder.batch_size = size
        start = time.perf_counter()
        encoder(texts)
        rates[str(size)] = round(len(texts) / (time.perf_counter() - start), 2)
    encoder.batch_size = int(max(rates, key=rates.__getitem__))
    return rates


def _sweeps(names: list[str], encoders: dict[str, Encoder], texts: list[str], sizes: list[int]) -> dict[str, Any]:
    """Each sentence-transformers row's batch-size sweep (none when one size is given); leaves it at its best."""
    sweeps: dict[str, Any] = {}
    for name in names:
        encoder = encoders[name]
        if len(sizes) > 1 and isinstance(encoder, StEncoder):
            rates = sweep_batch_sizes(encoder, texts, sizes)
            sweeps[name] = {"texts": len(texts), "docs_per_s": rates, "best": encoder.batch_size}
            print(f"{name} batch sweep on {len(texts)} texts: {rates} docs/s -> batch {encoder.batch_size}")
    return sweeps


def _rounds(
    names: list[str], encoders: dict[str, Encoder], texts: list[str], rounds: int
) -> tuple[dict[str, list[float]], dict[str, np.ndarray]]:
    """Texts/s of every encoder per round, the order rotated each round; and each encoder's last embeddings."""
    rates: dict[str, list[float]] = {name: [] for name in names}
    embedded: dict[str, np.ndarray] = {}
    for round_number in range(rounds):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            embedded[name] = encoders[name](texts)
            rates[name].append(len(texts) / (time.perf_counter() - start))
        print(f"round {round_number + 1}: " + ", ".join(f"{n} {rates[n][-1]:.1f}" for n in names) + " texts/s")
    return rates, embedded


def child(args: argparse.Namespace) -> None:
    """One encoder in a fresh process: its peak RSS over loading and one encode of the texts.

    The texts come in a JSON file: loading the dataset itself peaks far above any encoder and would hide them.
    """
    texts = json.loads(Path(args.texts_file).read_text())
    before = peak_rss_mib()
    encoders, _ = _encoders([args.child], args.st_sizes[0], device=args.device)
    encoders[args.child](texts)
    print(json.dumps({"rss_before_load_mb": round(before, 1), "peak_rss_mb": round(peak_rss_mib(), 1)}))


def _peak_rss(texts_file: Path, name: str, st_batch_size: int, device: str) -> dict[str, float] | None:
    """``st_batch_size``: the batch the sweep chose, so a sentence-transformers child holds the activations it timed."""
    command = [sys.executable, __file__, "--child", name, "--texts-file", str(texts_file), "--device", device]
    command += ["--st-batch-sizes", str(st_batch_size)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"peak RSS of {name}: the child failed: {done.stderr.strip().splitlines()[-1:]}")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="scifact", help="BEIR dataset name or folder")
    parser.add_argument("--docs", default="1000", help="documents timed: a number or 'all'")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", help="comma-separated encoders (default: every one that runs on --device)")
    parser.add_argument(
        "--st-batch-sizes",
        help="sentence-transformers batch sizes to sweep before timing (the fastest is timed); one size: no sweep "
        f"(default 16,32,64,128; {GPU_SWEEP} with --device cuda)",
    )
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    parser.add_argument("--st-sweep-docs", type=int, default=200, help="texts the batch-size sweep encodes")
    parser.add_argument("--ndcg", action="store_true", help="also nDCG@10 on the test split per encoder")
    parser.add_argument("--no-rss", dest="rss", action="store_false", help="skip the per-encoder child processes")
    parser.add_argument("--output", type=Path, help="JSON file for the results")
    parser.add_argument("--static", type=Path, help="a distill-static folder, timed as the encoder 'static'")
    parser.add_argument("--executor", choices=["ray"], help="compare the Ray executor with this process instead")
    parser.add_argument("--shard-size", type=int, default=100, help="with --executor: documents per shard file")
    parser.add_argument("--ray-workers", type=int, default=2, help="with --executor: actors of the widest Ray row")
    parser.add_argument("--texts", choices=TEXT_KINDS, default="docs", help="what is timed (nDCG stays SciFact's)")
    parser.add_argument("--max-tokens", type=int, help="cut every timed text to this many word pieces")
    parser.add_argument("--load", type=int, default=0, help="busy-loop processes running through the timed rounds")
    parser.add_argument("--plot", type=Path, help="with --ndcg: PNG of docs/s against nDCG@10")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--texts-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.docs != "all" and not args.docs.isdigit():
        parser.error("--docs takes a number or 'all'")
    try:
        args.device = pick_device(args.device)
    except EmbedkitError as error:
        parser.error(f"--device: {error}")
    on_gpu = torch.device(args.device).type == "cuda"
    if args.st_batch_sizes is None:
        args.st_batch_sizes = GPU_SWEEP if on_gpu else "16,32,64,128"
    sizes = [size.strip() for size in args.st_batch_sizes.split(",") if size.strip()]
    if not sizes or not all(size.isdigit() and int(size) > 0 for size in sizes):
        parser.error("--st-batch-sizes takes comma-separated positive numbers")
    args.st_sizes = [int(size) for size in sizes]
    if args.plot and not args.ndcg:
        parser.error("--plot draws nDCG@10 against speed: add --ndcg")
    if args.load < 0 or (args.max_tokens is not None and args.max_tokens < 1):
        parser.error("--load takes 0 or more processes and --max-tokens a positive number")
    if args.st_sweep_docs < 1:
        parser.error("--st-sweep-docs takes a positive number")
    if args.child:
        child(args)
        return
    if args.executor:
        from encode_executors import run_executors

        docs = None if args.docs == "all" else int(args.docs)
        run_executors(args.dataset, docs, args.rounds, args.shard_size, args.ray_workers, args.output)
        return

    default_names = GPU_ENCODERS if on_gpu else [*ST_ROWS, *BACKENDS]
    names = [name.strip() for name in (args.backends or ",".join(default_names)).split(",") if name.strip()]
    if args.static is not None and STATIC not in names:
        names.append(STATIC)
    unknown = [name for name in names if name not in ST_ROWS and name not in BACKENDS and name != STATIC]
    if unknown:
        parser.error(f"unknown encoders {unknown} (choose from {', '.join([*ST_ROWS, *BACKENDS])})")
    if on_gpu and (cpu_only := [name for name in names if name not in GPU_ENCODERS]):
        parser.error(f"{cpu_only} run on the CPU only; on {args.device} choose from {', '.join(GPU_ENCODERS)}")
    texts = benchmark_texts(args.dataset, args.texts, args.docs, args.max_tokens)
    heap_setting = heap.steady()  # process-wide: every encoder below runs under the same malloc thresholds
    try:
        if STATIC in names and args.static is None:
            parser.error("the encoder 'static' needs --static FOLDER")
        encoders, models = _encoders(names, args.st_sizes[0], args.static, args.device)
    except EmbedkitError as error:
        sys.exit(f"cannot load an encoder: {error}")
    machine = {
        "device": torch.cuda.get_device_name(args.device) if on_gpu else "cpu",
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "load_processes": args.load,
        "malloc": heap_setting,
    }
    cut = f", cut to {args.max_tokens} word pieces" if args.max_tokens else ""
    print(f"{len(texts)} {args.dataset} {args.texts}{cut}, {args.rounds} rounds, load {args.load}; {machine}")
    with cpu_load(args.load, seconds=3600):  # the sweep runs under the load too: the peer at its best size there
        sweeps = _sweeps(names, encoders, texts[: args.st_sweep_docs], args.st_sizes)
        rates, embedded = _rounds(names, encoders, texts, args.rounds)
    # the work is counted with a transformer row's own tokenizer and config (every one of them has the same)
    counted = next((name for name in names if name != STATIC), None)
    work = {"tokens": 0.0, "flops": 0.0}  # static alone: no forward to count
    if counted is not None:
        st = encoders[counted].st if isinstance(encoders[counted], StEncoder) else models[counted].st
        work = text_work(texts, st.tokenizer, st[0].auto_model.config, st.max_seq_length)
    peaks = {dtype: matmul_peak(DTYPES[dtype], args.device) for dtype in sorted({_precision(n) for n in names})}
    print(
        f"{work['tokens']:.0f} tokens; torch.mm peak on {args.device}: "
        + ", ".join(f"{dtype} {gflops:.1f} GFLOP/s" for dtype, gflops in peaks.items())
    )

    results: dict[str, dict[str, Any]] = {}
    for name in names:
        median = statistics.median(rates[name])
        row: dict[str, Any] = {
            "precision": _precision(name),
            "docs_per_s": [round(r, 2) for r in rates[name]],
            "median_docs_per_s": round(median, 2),
        }
        if name != STATIC:  # a static model does no forward and has its own tokenizer
            row["tokens_per_s"] = round(median * work["tokens"] / len(texts), 1)
            row["fraction_of_matmul_peak"] = round(
                median * work["flops"] / len(texts) / 1e9 / peaks[row["precision"]], 4
            )
        peer = _st_peer(name)
        if peer in embedded:
            row["st_peer"] = peer
            row["ratio_vs_st_same_precision"] = round(median / statistics.median(rates[peer]), 3)
        same_space = REFERENCE in embedded and embedded[name].shape == embedded[REFERENCE].shape  # static: its own
        if REFERENCE in embedded:
            row["ratio_vs_st_fp32"] = round(median / statistics.median(rates[REFERENCE]), 3)
        if same_space:
            row["cosine_vs_st_fp32"] = cosine_stats(embedded[name], embedded[REFERENCE])
        if peer == ST_BF16 and name != ST_BF16 and ST_BF16 in embedded:
            row["cosine_vs_st_bf16"] = cosine_stats(embedded[name], embedded[ST_BF16])
        if isinstance(encoders[name], StEncoder):
            row["st_batch_size"] = encoders[name].batch_size
        if name in models:
            row["settings"] = models[name].settings
        results[name] = row

    if args.rss:
        with tempfile.TemporaryDirectory() as tmp:
            texts_file = Path(tmp) / "texts.json"
            texts_file.write_text(json.dumps(texts))
            for name in names:
                batch = results[name].get("st_batch_size", args.st_sizes[0])
                results[name]["rss"] = _peak_rss(texts_file, name, batch, args.device)
                print(f"peak RSS {name}: {results[name]['rss']}")

    if args.ndcg:
        data = load_dataset(args.dataset)
        whole = args.texts == "docs" and args.max_tokens is None and len(texts) == len(data.corpus)
        for name in names:
            start = time.perf_counter()
            results[name].update(
                ndcg_on_test(encoders[name], models.get(name), data, embedded[name] if whole else None)
            )
            print(f"nDCG@10 {name}: {results[name]['ndcg_at_10']:.4f} ({time.perf_counter() - start:.0f} s)")

    print()
    print_table(results)
    if args.output:
        from embedkit.storage import write_json

        write_json(
            args.output,
            {
                "dataset": args.dataset,
                "texts": args.texts,
                "max_tokens": args.max_tokens,
                "count": len(texts),
                "machine": machine,
                "rounds": args.rounds,
                "st_batch_sizes": args.st_sizes,
                "st_batch_sweep": sweeps,
                "tokens": work["tokens"],
                "forward_flops": work["flops"],
                "matmul_peak_gflops": {dtype: round(gflops, 1) for dtype, gflops in peaks.items()},
                "encoders": results,
            },
        )
        print(f"written to {args.output}")
    if args.plot:
        title = f"{args.dataset}: speed on {len(texts)} {args.texts} ({machine['threads']} threads), nDCG@10 on test"
        plot_speed_vs_ndcg(results, title, args.plot)
        print(f"plot written to {args.plot}")


if __name__ == "__main__":
    main()
