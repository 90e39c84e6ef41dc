"""Does continued pretraining on the target corpus help the fine-tuned bi-encoder? A pre-registered study on SciFact.

    python benchmarks/domain_adaptation_scifact.py [--output runs/domain-adaptation] [--arms ...] [--seeds 1,2,3]
    python benchmarks/domain_adaptation_scifact.py --from-scratch --device cuda --steps 20000 ...   # a GPU
    python benchmarks/domain_adaptation_scifact.py --from-scratch --toy --dataset FOLDER    # the test suite's run

Arms, all from all-MiniLM-L6-v2 with its mean pooling and normalised vectors: ``finetune`` (fine-tune only),
``mlm``, ``mlm-matched`` (MLM for as long as RetroMAE takes: ``--matched-factor`` times the steps), ``retromae``
(the decoder conditioned on the mean-pooled vector), ``tsdae``, and ``dupmae`` (its own duplex representation,
reported apart). Every pretraining arm sees the same corpus chunks (128 tokens, a quarter shared between windows) in the
same order (one seed), trains the head and decoder alone for ``--warmup-steps`` steps and then everything for
``--steps``. Every arm then gets the same fine-tune (InfoNCE with one hard negative mined once by the base model;
one per seed in ``--seeds``, paired across arms by seed) and is evaluated on the test split, as is each pretrained
encoder before fine-tuning (zero-shot).

With ``--from-scratch`` the arms start from one randomly initialised 6-layer BERT (the default model's config and
tokenizer) and compare ``finetune`` (from random weights), ``mlm``, ``retromae`` and ``dupmae`` pretraining at
lr 1e-4 without a head warm-up.

Each finished stage is written to ``OUTPUT/stages/*.json`` and skipped when the script runs again, so an
interrupted study resumes where it stopped; ``OUTPUT/summary.json`` and ``summary.md`` hold the table, the
``embedkit compare`` output of each arm against fine-tune only, and the verdict of the criterion below.

Criterion (fixed before the run): an arm *helps* when its mean gain in nDCG@10 over fine-tune only is at least
+0.010, more than twice the spread (max - min) of fine-tune only across seeds, positive for every seed, and the
paired randomisation test of the seed-averaged per-query nDCG@10 gives p < 0.05 with a 95 % bootstrap interval above
0. It *hurts* when the same holds with the signs reversed; otherwise "no measurable effect at this budget".
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np

from embedkit import evaluate, load_dataset, load_model
from embedkit.models.reference import default_model_path
from embedkit.pretrain import PretrainConfig, pretrain, pretraining_record
from embedkit.storage import read_json, write_json, write_text
from embedkit.train import MiningSettings, TrainConfig, mine_hard_negatives, train, write_mined

CONTINUED_ARMS = ("finetune", "mlm", "retromae", "tsdae", "mlm-matched")
SCRATCH_ARMS = ("finetune", "mlm", "retromae", "dupmae")
MIN_GAIN = 0.010


class NotRun(Exception):
    """A stage ``--report-only`` found no record of."""


class Study:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.output = Path(args.output)
        self.data = load_dataset(args.dataset)
        self.base = str(default_model_path())

    def stage(self, name: str, run: Any) -> dict[str, Any]:
        """A stage's result, computed once: ``OUTPUT/stages/NAME.json`` is its record."""
        path = self.output / "stages" / f"{name.replace('/', '__')}.json"
        if path.is_file():
            return read_json(path)
        if self.args.report_only:
            raise NotRun(name)
        begun = time.perf_counter()
        result = run()
        result["stage_seconds"] = round(time.perf_counter() - begun, 1)
        write_json(path, result)
        print(f"[{time.strftime('%H:%M:%S')}] {name}: {result}", flush=True)
        return result

    def score(self, folder: str) -> dict[str, Any]:
        model = load_model(folder, dtype=self.args.eval_dtype, max_length=self.args.max_length, device=self.args.device)
        report = evaluate(model, self.data, "test", output=self.output / "reports", cache_dir=self.output / "cache")
        return {"ndcg_at_10": report["metrics"]["ndcg_at_10"], "report": report["folder"], "model": folder}

    def start_folder(self) -> str:
        """Where every arm starts: the default model, or (``--from-scratch``) one random BERT saved once."""
        if not self.args.from_scratch:
            return self.base
        folder = self.output / "scratch-init"
        if not (folder / "config.json").is_file():
            import torch
            from transformers import AutoConfig, AutoTokenizer, BertForMaskedLM

            config = AutoConfig.from_pretrained(self.base)
            if self.args.toy:
                config.update({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2})
                config.intermediate_size = 128
            torch.manual_seed(0)
            BertForMaskedLM(config).save_pretrained(folder)
            AutoTokenizer.from_pretrained(self.base).save_pretrained(folder)
            write_json(folder / "embedkit.json", {"pooling": "mean", "sentence_pooling": "mean", "normalize": True})
        return str(folder)

    def mined(self) -> str:
        def run() -> dict[str, Any]:
            base = load_model(self.base, max_length=self.args.max_length, device=self.args.device)
            settings = MiningSettings(split="train", range_min=10, range_max=100, num_negatives=1)
            records = mine_hard_negatives(base, self.data, settings, cache_dir=self.output / "cache")
            path = write_mined(self.output / "mined.jsonl", records, base, self.data, settings, overwrite=True)
            return {"path": str(path), "records": len(records)}

        return self.stage("mined", run)["path"]

    def pretrained(self, arm: str, start: str) -> dict[str, Any]:
        args = self.args
        objective = "mlm" if arm == "mlm-matched" else arm
        steps = round(args.steps * args.matched_factor) if arm == "mlm-matched" else args.steps
        warmup = 0 if args.from_scratch else args.warmup_steps

        def run() -> dict[str, Any]:
            folder = self.output / "pretrained" / arm
            config = PretrainConfig(
                output=str(folder),
                model=start,
                objective=objective,
                dataset=args.dataset,
                max_length=args.max_length,
                chunk_overlap=args.max_length // 4,
                batch_size=args.batch_size,
                max_steps=warmup + steps,
                head_warmup_steps=warmup,
                learning_rate=1e-4 if args.from_scratch else 2e-5,
                sentence_pooling="mean",
                normalize=True,
                seed=42,
                save_steps=50,
                logging_steps=max(1, min(25, steps // 4)),
                precision=args.precision,
            )
            pretrain(config)
            record = pretraining_record(folder)
            return {
                "folder": str(folder),
                "steps": record["steps"],
                "head_warmup_steps": warmup,
                "chunks": record["chunks"],
                "pretrain_seconds": round(record["train_seconds"], 1),
                "tokens_per_second": round(record["tokens_per_second"], 1),
                "first_loss": record["first_loss"],
                "last_loss": record["last_loss"],
            }

        return self.stage(f"pretrain/{arm}", run)

    def finetuned(self, arm: str, start: str, seed: int, mined: str) -> dict[str, Any]:
        args = self.args

        def run() -> dict[str, Any]:
            folder = self.output / "finetuned" / arm / f"seed{seed}"
            begun = time.perf_counter()
            train(
                TrainConfig(
                    output=str(folder),
                    model=start,
                    data=mined,
                    num_negatives=1,
                    drop_short_examples=True,
                    batch_size=32,
                    epochs=args.finetune_epochs,
                    learning_rate=3e-5,
                    max_length=args.max_length,
                    seed=seed,
                    precision=args.precision,
                    save_steps=100_000,
                )
            )
            seconds = round(time.perf_counter() - begun, 1)
            return {"finetune_seconds": seconds, "seed": seed, **self.score(str(folder))}

        return self.stage(f"finetune/{arm}/seed{seed}", run)

    def run(self) -> dict[str, Any]:
        args = self.args
        start = self.start_folder()
        mined = self.mined()
        seeds = [int(s) for s in args.seeds.split(",")]
        rows: dict[str, Any] = {"base": {"zero_shot": self.stage("zero-shot/base", lambda: self.score(start))}}
        for arm in args.arms.split(","):
            row: dict[str, Any] = {"seeds": []}
            rows[arm] = row
            try:
                origin = start
                if arm != "finetune":
                    row["pretraining"] = self.pretrained(arm, start)
                    origin = row["pretraining"]["folder"]
                    row["zero_shot"] = self.stage(f"zero-shot/{arm}", lambda origin=origin: self.score(origin))
                for seed in seeds:
                    row["seeds"].append(self.finetuned(arm, origin, seed, mined))
            except NotRun as missing:
                row["not_run_from"] = str(missing)
        return rows


def averaged_report(study: Study, arm: str, seeds: list[dict[str, Any]]) -> Path:
    """A report folder whose per-query scores are the mean over seeds, for ``embedkit compare``."""
    folder = study.output / "averaged" / arm
    per_query = [read_json(Path(s["report"]) / "per_query.json") for s in seeds]
    averaged = {
        query: {metric: float(np.mean([p[query][metric] for p in per_query])) for metric in per_query[0][query]}
        for query in per_query[0]
    }
    report = read_json(Path(seeds[0]["report"]) / "report.json")
    report["metrics"] = {m: float(np.mean([q[m] for q in averaged.values()])) for m in next(iter(averaged.values()))}
    report["averaged_over"] = [s["report"] for s in seeds]
    write_json(folder / "report.json", report)
    write_json(folder / "per_query.json", averaged)
    return folder


def verdict(baseline: list[float], arm: list[float], test: dict[str, Any]) -> str:
    gains = np.asarray(arm) - np.asarray(baseline)
    spread = max(baseline) - min(baseline)
    for sign, word in ((1, "helps"), (-1, "hurts")):
        signed = sign * gains
        if (
            signed.mean() >= MIN_GAIN
            and signed.mean() > 2 * spread
            and (signed > 0).all()
            and test["randomization_p_value"] < 0.05
            and sign * test["bootstrap_ci_low" if sign > 0 else "bootstrap_ci_high"] > 0
        ):
            return word
    return "no measurable effect at this budget"


def summarise(study: Study, rows: dict[str, Any]) -> dict[str, Any]:
    baseline_seeds = rows["finetune"]["seeds"]
    baseline = [s["ndcg_at_10"] for s in baseline_seeds]
    base_folder = averaged_report(study, "finetune", baseline_seeds)
    lines = [
        "| arm | pretrain steps (+ head warm-up) | pretrain s | zero-shot nDCG@10 | fine-tuned nDCG@10 per seed | "
        "mean ± spread | gain vs fine-tune only | p (randomisation) | 95 % bootstrap CI | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    summary: dict[str, Any] = {"rows": rows, "criterion": __doc__.split("Criterion")[1].strip(), "compare": {}}
    for arm, row in rows.items():
        if arm == "base":
            lines.append(
                f"| base model (no fine-tune) | – | – | {row['zero_shot']['ndcg_at_10']:.4f} | – | – | – | – | – | – |"
            )
            continue
        values = [s["ndcg_at_10"] for s in row["seeds"]]
        pretraining = row.get("pretraining")
        if len(values) < len(baseline) and arm != "finetune":
            shown = ", ".join(f"{v:.4f}" for v in values) or "–"
            zero = f"{row['zero_shot']['ndcg_at_10']:.4f}" if "zero_shot" in row else "–"
            word = f"not run to the end (stopped at {row.get('not_run_from')})"
            lines.append(f"| {arm} | – | – | {zero} | {shown} | – | – | – | – | {word} |")
            continue
        steps = (
            f"{pretraining['steps'] - pretraining['head_warmup_steps']} (+{pretraining['head_warmup_steps']})"
            if pretraining
            else "–"
        )
        seconds = f"{pretraining['pretrain_seconds']:.0f}" if pretraining else "–"
        zero = f"{row['zero_shot']['ndcg_at_10']:.4f}" if "zero_shot" in row else "–"
        cells = [
            arm,
            steps,
            seconds,
            zero,
            ", ".join(f"{v:.4f}" for v in values),
            f"{np.mean(values):.4f} ± {max(values) - min(values):.4f}",
        ]
        if arm == "finetune":
            lines.append("| " + " | ".join([*cells, "–", "–", "–", "baseline"]) + " |")
            continue
        folder = averaged_report(study, arm, row["seeds"])
        compare_dir = study.output / "compare" / arm
        command = [
            sys.executable,
            "-m",
            "embedkit.cli",
            "compare",
            str(base_folder),
            str(folder),
            "--metric",
            "ndcg_at_10",
            "-o",
            str(compare_dir),
            "--overwrite",
        ]
        printed = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        test = read_json(compare_dir / "compare.json")["comparisons"][0]["tests"]["ndcg_at_10"]
        word = verdict(baseline, values, test)
        summary["compare"][arm] = {
            "command": "embedkit " + " ".join(command[3:]),
            "output": printed,
            "test": test,
            "verdict": word,
        }
        gain = np.mean(values) - np.mean(baseline)
        cells += [
            f"{gain:+.4f}",
            f"{test['randomization_p_value']:.4f}",
            f"[{test['bootstrap_ci_low']:+.4f}, {test['bootstrap_ci_high']:+.4f}]",
            word,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    summary["table"] = "\n".join(lines)
    write_json(study.output / "summary.json", summary)
    compares = [
        f"### {arm} vs fine-tune only\n\n```\n{c['output'].strip()}\n```" for arm, c in summary["compare"].items()
    ]
    write_text(study.output / "summary.md", summary["table"] + "\n\n" + "\n\n".join(compares) + "\n")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="runs/domain-adaptation")
    parser.add_argument("--dataset", default="scifact", help="BEIR name or folder: corpus, train and test qrels")
    parser.add_argument("--arms", help="comma-separated (default: every arm of the mode)")
    parser.add_argument("--seeds", default="1,2,3", help="fine-tune seeds, paired across arms")
    parser.add_argument("--steps", type=int, default=150, help="pretraining steps after the head warm-up")
    parser.add_argument("--warmup-steps", type=int, default=25, help="head warm-up steps (encoder frozen)")
    parser.add_argument("--matched-factor", type=float, default=2.4, help="mlm-matched steps / steps (measured)")
    parser.add_argument("--batch-size", type=int, default=32, help="pretraining chunks per step")
    parser.add_argument("--max-length", type=int, default=128, help="tokens: pretraining chunks, fine-tune, eval")
    parser.add_argument("--finetune-epochs", type=float, default=1.0)
    parser.add_argument("--precision", default="auto", help="training precision (auto: bf16 on a GPU, else fp32)")
    parser.add_argument("--eval-dtype", default="bfloat16", help="encoding precision of the evaluations")
    parser.add_argument("--device", default=None)
    parser.add_argument("--from-scratch", action="store_true", help="start every arm from one random 6-layer BERT")
    parser.add_argument("--toy", action="store_true", help="a 2-layer, 64-wide random BERT (with --from-scratch)")
    parser.add_argument("--report-only", action="store_true", help="summarise the finished stages; run nothing")
    args = parser.parse_args()
    args.arms = args.arms or ",".join(SCRATCH_ARMS if args.from_scratch else CONTINUED_ARMS)
    if "finetune" not in args.arms.split(","):
        parser.error("--arms must include finetune, the baseline every arm is compared with")
    study = Study(args)
    if not args.report_only:
        write_json(study.output / "settings.json", vars(args))
    summary = summarise(study, study.run())
    print(summary["table"])


if __name__ == "__main__":
    main()
