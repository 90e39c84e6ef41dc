"""The merged arms of ``finetune_scifact.py`` (WiSE-FT with the base model, checkpoint soups), their table with the
transfer scores, and their paired comparison on SciFact test (``embedkit compare``'s ``compare_runs``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from embedkit import load_dataset, load_model
from embedkit.evaluation.compare import compare_runs

TRANSFER = ("cacm", "cisi", "cranfield", "lisa", "medline", "npl")


def merged_arms(recipe: str, output: Path, folder: Path, cache: Path, score: Callable) -> dict[str, dict]:
    """WiSE-FT of the recipe's model, the best soup of its kept checkpoints, and that soup's WiSE-FT; chosen on dev."""
    from embedkit.models.reference import default_model_path
    from embedkit.train import MergeSettings, merge_models
    from embedkit.train.merge import average, state_of
    from embedkit.training.evaluator import RetrievalEvaluator
    from embedkit.training.run_folder import checkpoint_folders

    tuned = output / "models" / recipe
    kept = checkpoint_folders(tuned / "checkpoints", complete=False)  # kept without the Trainer's state
    dev = RetrievalEvaluator(load_dataset(folder), "dev", dtype="bfloat16")
    network = load_model(kept[-1]).st
    states = [state_of(load_model(path).st) for path in kept]  # each checkpoint read once
    soup_dev = {}
    for k in range(2, len(kept) + 1):
        network.load_state_dict(average(states[-k:]))
        soup_dev[k] = dev.score(network)["ndcg_at_10"]
    k = min(size for size, value in soup_dev.items() if value == max(soup_dev.values()))
    soup = tuple(str(path) for path in kept[-k:])
    base, arms = str(default_model_path()), {}
    made = {
        f"{recipe}+wise-ft": MergeSettings((str(tuned),), base, "auto", str(folder), "dev", "bfloat16"),
        f"{recipe}+soup": MergeSettings(soup),
        f"{recipe}+soup+wise-ft": MergeSettings(soup, base, "auto", str(folder), "dev", "bfloat16"),
    }
    for name, settings in made.items():
        start = time.perf_counter()
        model = merge_models(settings, output / "models" / name, overwrite=True)
        record = json.loads((model / "embedkit_merge.json").read_text())
        arms[name] = {
            "alpha": record["alpha"],
            "alpha_dev_scores": record["dev_scores"],
            "soup_checkpoints": [Path(p).name for p in soup] if "soup" in name else None,
            "soup_dev_scores": soup_dev if "soup" in name else None,
            "merge_s": round(time.perf_counter() - start, 1),
            **score(load_model(model, max_length=256), load_dataset(folder), cache, output / "reports", name),
        }
        print(name, {key: arms[name][key] for key in ("alpha", "dev_ndcg_at_10", "test_ndcg_at_10")}, flush=True)
    return arms


def arms(results: dict, recipe: str) -> list[str]:
    return [
        name for name in (recipe, f"{recipe}+wise-ft", f"{recipe}+soup", f"{recipe}+soup+wise-ft") if name in results
    ]


def compare_arms(results: dict, recipe: str) -> dict:
    """On SciFact test, paired: each merged arm against the model it was merged from (the recipe's model, or the
    soup), and every arm against the base model."""
    names = arms(results, recipe)
    pairs = [(recipe, name) for name in names[1:] if name != f"{recipe}+soup+wise-ft"]
    if f"{recipe}+soup+wise-ft" in names:
        pairs.append((f"{recipe}+soup", f"{recipe}+soup+wise-ft"))
    pairs += [("base", name) for name in names]
    against: dict[str, dict] = {}
    for baseline, name in pairs:
        report = compare_runs([results[baseline]["test_report"], results[name]["test_report"]])
        against.setdefault(baseline, {})[name] = report["comparisons"][0]["tests"]
    return against


def transfer_table(results: dict) -> str:
    """Every model's SciFact dev and test, its transfer mean and each collection, and what the merge chose."""
    names = [
        "base",
        *(name for name in results if name in ("baseline", "epochs-6-dev")),
        *arms(results, "epochs-6-dev")[1:],
    ]
    names = [name for name in names if name in results]
    base = results["base"]["transfer"]
    head = "| model | chosen on dev | SciFact dev | SciFact test | transfer mean (vs base) | " + " | ".join(TRANSFER)
    lines = [head + " |", "| --- " * (5 + len(TRANSFER)) + "|"]
    for name in names:
        row = results[name]
        chosen = []
        if row.get("alpha") is not None:
            chosen.append(f"alpha {row['alpha']:g}")
        if row.get("soup_checkpoints"):
            chosen.append(f"soup of {len(row['soup_checkpoints'])}")
        if row.get("best_checkpoint"):
            chosen.append(f"step {row['best_checkpoint']['step']}")
        transfer = row["transfer"]
        cells = [
            name,
            ", ".join(chosen) or "-",
            f"{row['dev_ndcg_at_10']:.4f}",
            f"{row['test_ndcg_at_10']:.4f}",
            f"{transfer['mean']:.4f} ({transfer['mean'] - base['mean']:+.4f})",
            *(f"{transfer[c]:.4f}" for c in TRANSFER),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
