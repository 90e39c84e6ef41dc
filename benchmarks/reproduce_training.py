"""Train the SPLADE and ColBERT study arms for their first steps with this checkout's code and with an older
commit's, and compare the weights bit for bit: whether a change altered training itself, which a retrained model's
score alone cannot tell (``reproduce_scifact.py`` scores the whole runs).

    python benchmarks/reproduce_training.py                                     # this checkout's code
    PYTHONPATH=<worktree at REV> python benchmarks/reproduce_training.py        # REV's code, the same settings

Both write ``benchmarks/results/reproduce_training.json``, each run under the commit of the ``embedkit`` that
trained it. The settings are the studies' own (imported), with ``max_steps`` cut to ``--steps``, on the fine-tune
study's split and mined file (``reproduce_scifact.py`` makes them). torch's generator is seeded with the config's
seed before each run, so code that drew a new head from the host's generator (as SPLADE's MLM head was before its
seeding) draws what seeded code draws. The criterion, fixed before the runs: equal sha256 of every saved tensor.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import late_interaction_scifact as late
import sparse_scifact as sparse
import torch
from reproduce_scifact import code_commit, prepared
from safetensors.torch import load_file

from embedkit.train import train

RESULTS = Path(__file__).resolve().parent / "results"
ARMS = {  # name: its study's training settings
    "splade": lambda output, finetune: sparse.arm_config("splade", output, finetune),
    "colbert": lambda output, finetune: late.model_config("colbert", output, finetune),
}


def weights_sha256(folder: Path) -> str:
    """One digest over every saved tensor (name, dtype, shape, bytes), whatever file holds it."""
    digest = hashlib.sha256()
    tensors = {name: t for file in sorted(folder.rglob("*.safetensors")) for name, t in load_file(file).items()}
    for name in sorted(tensors):
        tensor = tensors[name].contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="runs/reproduce-training")
    parser.add_argument("--finetune", default="runs/finetune", help="the dense fine-tune study's output folder")
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    path = RESULTS / "reproduce_training.json"
    results = json.loads(path.read_text()) if path.is_file() else {}
    commit, finetune = code_commit(), Path(args.finetune)
    prepared(finetune)
    for name, settings in ARMS.items():
        study = settings(Path(args.output) / commit[:12], finetune)
        config = dataclasses.replace(study, max_steps=args.steps)
        torch.manual_seed(config.seed)
        start = time.perf_counter()
        train(config)
        record = json.loads((Path(config.output) / "embedkit_training.json").read_text())
        entry = results.setdefault(name, {"steps": args.steps})
        entry.setdefault("trained_by", {})[commit] = {
            "weights_sha256": weights_sha256(Path(config.output)),
            "loss_history": record.get("loss_history"),
            "seconds": round(time.perf_counter() - start, 1),
        }
        entry["codes_agree"] = len({run["weights_sha256"] for run in entry["trained_by"].values()}) == 1
        machine = {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                   "threads": os.environ.get("OMP_NUM_THREADS"), "torch": torch.__version__}  # fmt: skip
        results |= {
            "command": "python benchmarks/reproduce_training.py (see its docstring for the second code)",
            "date": time.strftime("%Y-%m-%d"),
            "machine": machine,
        }
        path.write_text(json.dumps(results, indent=2) + "\n")
        print(name, entry, flush=True)


if __name__ == "__main__":
    main()
