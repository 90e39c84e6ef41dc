"""Why inference-free SPLADE ranked below chance and CSR stayed at chance in the learned-sparse study: short runs of
those arms (the study's data and settings, ``sparse_scifact.arm_config``) before and after each fix, measured where
the defect shows, on SciFact dev queries (never test).

    python benchmarks/sparse_diagnosis.py --steps 30      # -> benchmarks/results/sparse_diagnosis.json

- ``inference-free``: the query table started at 1 for every word ("ones", as sentence-transformers starts it) or at
  the training documents' idf (the fix). Recorded: the table's spread after the run, the share of the vocabulary
  active in every one of 60 dev documents (the document side's new MLM head), and how often a query's relevant
  document outscores a random one.
- ``csr``: the ranking term at scale 1 (``temperature`` 1, the study's setting) or at the dense temperature's scale 20
  (the fix), the encoder frozen in both; started from the default model (the study's start, its dense fine-tune, is
  not kept here). Recorded: the ranking loss over the steps against chance, log(2 x batch), and the same win rate.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np
from sparse_scifact import arm_config

from embedkit import load_dataset
from embedkit.train import train

RESULT = Path(__file__).parent / "results" / "sparse_diagnosis.json"


def win_rate(folder: Path, dataset, count: int = 60) -> dict:
    """How often each of ``count`` dev queries' first relevant document outscores a random document; and the share of
    the vocabulary active in every one of those documents."""
    from sentence_transformers.sparse_encoder import SparseEncoder

    model = SparseEncoder(str(folder))
    qrels, queries = dataset.qrels("dev"), dataset.split_queries("dev")
    query_ids = sorted(qrels)[:count]
    relevant = [next(iter(qrels[q])) for q in query_ids]
    rng = np.random.default_rng(0)
    corpus_ids = [dataset.corpus[int(i)]["_id"] for i in rng.choice(len(dataset.corpus), count, replace=False)]
    texts = dataset.documents(relevant + corpus_ids)
    encode = model.encode_document
    q = model.encode_query([queries[x] for x in query_ids], convert_to_tensor=True).to_dense()
    r = encode([texts[d] for d in relevant], convert_to_tensor=True).to_dense()
    n = encode([texts[d] for d in corpus_ids], convert_to_tensor=True).to_dense()
    wins = int(((q * r).sum(1) > (q * n).sum(1)).sum())
    documents = np.concatenate([r.numpy(), n.numpy()])
    return {"relevant_beats_random": f"{wins}/{count}", "win_rate": wins / count,
            "vocabulary_active_in_every_document": float((documents > 0).all(0).mean())}  # fmt: skip


def run(name: str, arm: str, steps: int, output: Path, finetune: Path, **changes) -> dict:
    config = arm_config(arm, output / name, finetune)
    config.max_steps, config.overwrite, config.logging_steps = steps, True, 5
    for key, value in changes.items():
        setattr(config, key, value)
    if arm == "csr":
        config.model, config.freeze_encoder = None, True  # the default model: the study's start is not kept here
    start = time.perf_counter()
    if name == "inference-free-ones":  # the start before the fix: no documents given, so every weight is 1
        with mock.patch("embedkit.train.recipes.document_texts", lambda examples: None):
            train(config)
    else:
        train(config)
    seconds = time.perf_counter() - start
    folder = Path(config.output)
    record = json.loads((folder / "embedkit_training.json").read_text())
    row = {"arm": arm, "steps": record["steps"], "train_seconds": round(seconds, 1), "changes": changes,
           "loss_history": record["loss_history"], "loss_terms": record["loss_terms"],
           "base_model": record.get("base_model")}  # fmt: skip
    if arm == "splade-inference-free":
        from sentence_transformers.sparse_encoder import SparseEncoder

        table = SparseEncoder(str(folder))[0].sub_modules["query"][0]
        weight = table.weight.detach().numpy()
        vocab = dict(zip(table.tokenizer.convert_ids_to_tokens(range(len(weight))), weight.tolist()))
        row["query_table"] = {"min": float(weight.min()), "max": float(weight.max()),
                              "the": vocab["the"], ".": vocab["."], "mortality": vocab["mortality"]}  # fmt: skip
    return row | win_rate(folder, load_dataset(finetune / "scifact-dev"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--output", default="runs/sparse-diagnosis")
    parser.add_argument("--finetune", default="runs/finetune")
    args = parser.parse_args()
    output, finetune = Path(args.output), Path(args.finetune)
    batch = arm_config("csr", output, finetune).batch_size
    rows = {
        "inference-free-ones": run("inference-free-ones", "splade-inference-free", args.steps, output, finetune),
        "inference-free-idf": run("inference-free-idf", "splade-inference-free", args.steps, output, finetune),
        "csr-scale-1": run("csr-scale-1", "csr", args.steps, output, finetune, temperature=1.0),
        "csr-scale-20": run("csr-scale-20", "csr", args.steps, output, finetune, temperature=0.05),
    }
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {
        "command": " ".join(["python", *sys.argv]),
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit,
        "cpu": {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count()},
        "chance_loss": math.log(2 * batch),
        "split": "dev (scifact-dev of the fine-tune study)",
        "rows": rows,
    }
    RESULT.write_text(json.dumps(result, indent=1) + "\n")
    for name, row in rows.items():
        print(name, row["relevant_beats_random"], row["loss_terms"][-1:], row.get("query_table"))


if __name__ == "__main__":
    main()
