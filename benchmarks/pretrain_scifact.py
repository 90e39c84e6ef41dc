"""Masked-autoencoder pretraining on the SciFact corpus, then the contrastive SciFact fine-tune, evaluated on test.

    python benchmarks/pretrain_scifact.py [--steps 1000] [--objectives mlm,retromae,dupmae] [--output runs/pretrain]
    python benchmarks/pretrain_scifact.py --device cuda --steps 20000 --batch-size 128      # a GPU: bf16 by default
    python benchmarks/pretrain_scifact.py --steps 5 --finetune-epochs 0.05 --corpus-limit 200 --eval-queries 20  # smoke

Rows: the default model as shipped (base); the fine-tune of ``benchmarks/finetune_scifact.py`` on it (fine-tune only:
hard negatives mined by the base model from SciFact train, ranks 10-100, relative margin 0.05, InfoNCE); and, for each
objective, the default model's encoder continued-pretrained on the SciFact corpus for the same number of steps, then
the same fine-tune (same mined file, epochs, batch size and learning rate), pooling with ``--pooling`` (CLS, what
RetroMAE trains, by default). Every model is evaluated with ``embedkit.evaluate`` on SciFact test (``--eval-queries N``
evaluates on a small slice instead: N test queries, their relevant documents and 280 others, for smoke runs only).
Prints and writes ``result.json`` with nDCG@10, pretraining steps, tokens/s and wall times.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from embedkit import evaluate, load_dataset, load_model
from embedkit.data import doc_text
from embedkit.models.reference import default_model_path
from embedkit.pretrain import PretrainConfig, pretrain, pretraining_record
from embedkit.storage import write_json, write_lines
from embedkit.train import MiningSettings, TrainConfig, mine_hard_negatives, train, write_mined


def eval_slice(data, folder: Path, queries: int) -> Path:
    """A small BEIR folder from SciFact test: ``queries`` queries, their relevant documents and 280 others."""
    qrels = data.qrels("test")
    chosen = list(qrels)[:queries]
    relevant = {doc for q in chosen for doc in qrels[q]}
    corpus = data.corpus
    docs = [row for row in corpus if row["_id"] in relevant]
    docs += [row for row in corpus.select(range(400)) if row["_id"] not in relevant][:280]
    write_lines(folder / "corpus.jsonl", [json.dumps(row) for row in docs])
    write_lines(folder / "queries.jsonl", [json.dumps({"_id": q, "text": data.queries[q]}) for q in chosen])
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{s}" for q in chosen for d, s in qrels[q].items()]
    write_lines(folder / "qrels" / "test.tsv", lines)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="runs/pretrain")
    parser.add_argument("--objectives", default="mlm,retromae,dupmae")
    parser.add_argument("--steps", type=int, default=1000, help="pretraining steps, the same for every objective")
    parser.add_argument("--batch-size", type=int, default=32, help="pretraining texts per batch")
    parser.add_argument("--max-length", type=int, default=256, help="tokens per text, pretraining and fine-tuning")
    parser.add_argument("--learning-rate", type=float, default=5e-5, help="pretraining peak learning rate")
    parser.add_argument("--masking", default="whole_word")
    parser.add_argument("--corpus-limit", type=int, help="pretrain on the first N SciFact documents only")
    parser.add_argument("--pooling", default="cls", help="pooling of the pretrained encoders when fine-tuned")
    parser.add_argument("--finetune-epochs", type=float, default=2.0)
    parser.add_argument("--finetune-batch-size", type=int, default=32)
    parser.add_argument("--finetune-learning-rate", type=float, default=3e-5)
    parser.add_argument("--negatives", type=int, default=1)
    parser.add_argument("--eval-queries", type=int, help="evaluate on a slice of N test queries (smoke runs)")
    parser.add_argument("--device", default=None, help="cpu | cuda (default: what torch sees)")
    parser.add_argument("--precision", default="auto", help="auto = bf16 on a GPU that supports it, else fp32")
    parser.add_argument(
        "--no-pretrained-eval", action="store_true", help="skip scoring the pretrained encoders before fine-tuning"
    )
    args = parser.parse_args()
    output = Path(args.output)
    start = time.perf_counter()
    data = load_dataset("scifact")
    eval_data = eval_slice(data, output / "eval-slice", args.eval_queries) if args.eval_queries else data
    base = load_model(device=args.device)

    def score(model_path: Path | None, **kwargs) -> float:
        model = base if model_path is None else load_model(model_path, device=args.device, **kwargs)
        report = evaluate(model, eval_data, output=output / "reports")
        del model
        gc.collect()
        return report["metrics"]["ndcg_at_10"]

    def finetune(start_from: str, folder: Path, pooling: str | None) -> dict:
        begun = time.perf_counter()
        config = TrainConfig(
            output=str(folder),
            model=start_from,
            pooling=pooling,
            data=str(mined),
            num_negatives=args.negatives,
            drop_short_examples=True,
            batch_size=args.finetune_batch_size,
            epochs=args.finetune_epochs,
            learning_rate=args.finetune_learning_rate,
            precision=args.precision,
            max_length=args.max_length,
            save_steps=100_000,
            resume=False,
        )
        train(config)
        return {"finetune_s": round(time.perf_counter() - begun, 1), "ndcg_at_10": score(folder)}

    settings = MiningSettings(split="train", range_min=10, range_max=100, num_negatives=args.negatives)
    mined = write_mined(output / "mined.jsonl", mine_hard_negatives(base, data, settings), base, data, settings)
    results: dict = {
        "settings": vars(args),
        "eval": "SciFact test" if not args.eval_queries else f"slice of {args.eval_queries} SciFact test queries",
        "rows": {"base": {"ndcg_at_10": score(None)}},
    }
    results["rows"]["fine-tune only"] = finetune(str(default_model_path()), output / "finetune-only", None)
    for objective in args.objectives.split(","):
        folder = output / f"{objective}-encoder"
        pretrain(
            PretrainConfig(
                output=str(folder),
                objective=objective,
                dataset="scifact",
                corpus_limit=args.corpus_limit,
                max_length=args.max_length,
                masking=args.masking,
                batch_size=args.batch_size,
                max_steps=args.steps,
                learning_rate=args.learning_rate,
                precision=args.precision,
                save_steps=max(args.steps, 1),
                logging_steps=max(1, min(50, args.steps // 5)),
                resume=False,
            )
        )
        record = pretraining_record(folder)
        row = {
            "pretrain_steps": record["steps"],
            "pretrain_tokens_per_second": round(record["tokens_per_second"], 1),
            "pretrain_s": round(record["train_seconds"], 1),
            "pretrain_first_loss": record["first_loss"],
            "pretrain_last_loss": record["last_loss"],
        }
        if not args.no_pretrained_eval:
            row["pretrained_ndcg_at_10"] = score(folder, pooling=args.pooling, max_length=args.max_length)
        row |= finetune(str(folder), output / f"{objective}-finetuned", args.pooling)
        results["rows"][f"{objective} + fine-tune"] = row
    results["total_s"] = round(time.perf_counter() - start, 1)
    results["corpus"] = {"documents": len(data.corpus), "text": doc_text.__doc__}
    print(json.dumps(results, indent=2))
    write_json(output / "result.json", results)


if __name__ == "__main__":
    main()
