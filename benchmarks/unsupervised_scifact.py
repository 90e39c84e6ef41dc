"""Short unsupervised contrastive runs on the SciFact corpus: SimCSE and Contriever-style cropping.

    python benchmarks/unsupervised_scifact.py [--model PATH] [--steps 200] [--output runs/unsupervised]

Without ``--model`` it starts from a 4-layer BERT built from a config (random weights, the default model's
tokenizer), so a run takes minutes on a CPU. Prints, for the starting point and each objective, the first and last
logged training losses and the nDCG@10 that ``embedkit evaluate`` gives on SciFact test.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from transformers import AutoTokenizer, BertConfig, BertModel

from embedkit import evaluate, load_dataset, load_model
from embedkit.models.reference import default_model_path
from embedkit.train import TrainConfig, train, training_record


def small_bert(folder: Path) -> Path:
    config = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
    BertModel(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(default_model_path()).save_pretrained(folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--output", default="runs/unsupervised")
    args = parser.parse_args()
    output = Path(args.output)
    start_from = args.model or str(small_bert(output / "init"))
    data = load_dataset("scifact")
    results = {
        "start": {
            "model": start_from,
            "ndcg_at_10": evaluate(load_model(start_from, pooling="mean"), data)["metrics"]["ndcg_at_10"],
        }
    }
    for objective in ("simcse", "cropping"):
        folder = output / objective
        train(
            TrainConfig(
                output=str(folder),
                model=start_from,
                pooling="mean",
                objective=objective,
                dataset="scifact",
                batch_size=args.batch_size,
                max_steps=args.steps,
                learning_rate=args.learning_rate,
                max_length=128,
                logging_steps=10,
                save_steps=10_000,
                resume=False,
            )
        )
        record = training_record(folder)
        results[objective] = {
            "first_losses": record["loss_history"][:3],
            "last_losses": record["loss_history"][-3:],
            "train_seconds": record["train_seconds"],
            "ndcg_at_10": evaluate(load_model(folder), data)["metrics"]["ndcg_at_10"],
        }
    print(json.dumps(results, indent=2))
    (output / "result.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
