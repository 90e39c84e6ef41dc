"""Retrain the committed SPLADE and ColBERT study arms, score them on SciFact test with this commit's code and with
an older commit's, and compare: the check that a refactor lost nothing a trained model measures.

    python benchmarks/reproduce_scifact.py                      # train (if absent) and score with this checkout
    PYTHONPATH=<worktree at REV> python benchmarks/reproduce_scifact.py --score-only   # the same models, REV's code

Both write ``benchmarks/results/reproduce_scifact.json``, each score under the commit of the ``embedkit`` that
computed it. Same data as the studies (the dense fine-tune study's seeded train/dev split and its base-model mined
negatives, made here if absent), same training settings (imported from the studies, not copied), scored on test
only. The criteria, fixed before the runs: the same model scored by two commits' code gives equal nDCG@10 and
recall@100 (to 1e-9); the retrained model against the committed study JSON is reported as a difference, since CPU
training is reproducible only to rounding (the first logged loss agrees to six digits, later ones drift).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import late_interaction_scifact as late
import sparse_scifact as sparse
from finetune_scifact import dev_split_folder

import embedkit
from embedkit import EvaluateOptions, evaluate, load_dataset, load_model
from embedkit.search import LateInteraction, Sparse
from embedkit.train import MiningSettings, mine_hard_negatives, write_mined

RESULTS = Path(__file__).resolve().parent / "results"
METRICS = ("test_ndcg_at_10", "test_recall_at_100")


def prepared(finetune: Path) -> Path:
    """The study's split folder and mined file (base model, train queries, ranks 10-100, 4 negatives)."""
    folder, mined = dev_split_folder(finetune), finetune / "mined.jsonl"
    if not mined.is_file():
        base, data = load_model(), load_dataset(folder)
        settings = MiningSettings("train", 10, 100, num_negatives=4, candidates="dense")
        write_mined(mined, mine_hard_negatives(base, data, settings, cache_dir=finetune / "cache"), base, data,
                    settings, True)  # fmt: skip
    return folder


def test_scores(model, spec, folder: Path, cache: Path, reports: Path) -> dict[str, float]:
    report = evaluate(model, folder, "test", spec, output=reports, cache_dir=cache,
                      options=EvaluateOptions(overwrite=True))  # fmt: skip
    return {f"test_{key}": report["metrics"][key] for key in ("ndcg_at_10", "recall_at_100")}


def arm_splade(output: Path, finetune: Path, folder: Path, train: bool) -> dict[str, float]:
    """The ``splade`` arm as ``sparse_scifact.run_arm`` trains it, scored as it scores it (capped non-zeros)."""
    config = sparse.arm_config("splade", output / "sparse", finetune)
    trained = Path(config.output)
    if train and not (trained / "embedkit_training.json").is_file():
        sparse.train(config)
    return test_scores(sparse.load_capped(trained), Sparse(), folder, finetune / "cache", output / "reports" / "splade")


def arm_colbert(output: Path, finetune: Path, folder: Path, train: bool) -> dict[str, float]:
    """The ``colbert`` arm as ``late_interaction_scifact.train_model`` trains it, scored by MaxSim."""
    if train:
        late.train_model("colbert", output / "late", finetune)
    model = late.late_model(output / "late", "colbert")
    return test_scores(model, LateInteraction(), folder, finetune / "cache", output / "reports" / "colbert")


ARMS = {  # name: (committed JSON, its key, how to reproduce it)
    "splade": ("sparse_scifact.json", "splade", arm_splade),
    "colbert": ("late_interaction_scifact.json", "colbert", arm_colbert),
}


def code_commit() -> str:
    """The commit of the ``embedkit`` package imported (a worktree's under PYTHONPATH, else this checkout's)."""
    package = Path(embedkit.__file__).resolve().parents[1]
    return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=package).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="runs/reproduce")
    parser.add_argument("--finetune", default="runs/finetune", help="the dense fine-tune study's output folder")
    parser.add_argument("--arm", action="append", choices=sorted(ARMS), default=[])
    parser.add_argument("--score-only", action="store_true", help="score the trained models; never train")
    args = parser.parse_args()
    output, finetune = Path(args.output), Path(args.finetune)
    path = RESULTS / "reproduce_scifact.json"
    results = json.loads(path.read_text()) if path.is_file() else {}
    commit, folder = code_commit(), prepared(finetune)
    for name in args.arm or sorted(ARMS):
        file, key, reproduce = ARMS[name]
        start = time.perf_counter()
        measured = reproduce(output, finetune, folder, not args.score_only)
        committed = {metric: json.loads((RESULTS / file).read_text())[key][metric] for metric in METRICS}
        entry = results.setdefault(name, {"source": f"{file}:{key}"})
        entry |= {"committed": committed}
        entry.setdefault("scored_by", {})[commit] = {**measured, "seconds": round(time.perf_counter() - start, 1)}
        scores = list(entry["scored_by"].values())
        entry["codes_agree"] = all(abs(a[m] - scores[0][m]) <= 1e-9 for a in scores for m in METRICS)
        entry["retrained_minus_committed"] = {m: scores[0][m] - committed[m] for m in METRICS}
        results["machine"] = {
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "threads": os.environ.get("OMP_NUM_THREADS"),
            "python": sys.version.split()[0],
        }
        results["command"] = "python benchmarks/reproduce_scifact.py (see its docstring for the second code)"
        results["date"] = time.strftime("%Y-%m-%d")
        path.write_text(json.dumps(results, indent=2) + "\n")
        print(name, entry, flush=True)


if __name__ == "__main__":
    main()
