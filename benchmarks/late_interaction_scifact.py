"""Late interaction on SciFact: ColBERT and XTR fine-tuned from the default model and searched by exact MaxSim, with
and without token pooling, and ColBERT as a second stage over the dense fine-tune and over BM25; each against the
dense fine-tune, chosen on dev, with held-out transfer, bytes per document, build time and queries/s.

    python benchmarks/late_interaction_scifact.py --stage arms    # train ColBERT and XTR, score every arm
    python benchmarks/late_interaction_scifact.py --stage costs   # storage, build time, queries/s, IVF vs exact
    python benchmarks/late_interaction_scifact.py --stage transfer  # the six classic collections, per arm
    python benchmarks/late_interaction_scifact.py --table

Data: the dense fine-tune study's SciFact folder (``benchmarks/finetune_scifact.py``: train qrels split 90/10 into
train and dev, seeded), its mined file (base-model negatives, ranks 10-100) and its dev-chosen ``epochs-6-dev`` model,
the baseline (its scores and test run are that study's). Both late-interaction models start from all-MiniLM-L6-v2
with a new 384 -> 128 token projection (from the training seed, 42; recorded) and train on ``train`` with the dense
baseline recipe's batch (32 queries, 1 hard negative, in-batch negatives), lr 3e-5, 128 tokens, bf16, for 3 epochs
(``epochs-dev``'s length; the dense 6 would double the CPU time): ``colbert`` by MaxSim, ``xtr`` by XTR's in-batch
top-k token scoring. Every arm is scored at 256 document tokens, token vectors stored in float16, exact MaxSim:

- ``colbert``, ``xtr``: the models as first-stage retrievers;
- ``colbert+pool2``: ``colbert`` with hierarchical token pooling (factor 2) of the documents;
- ``rerank:dense``, ``rerank:bm25``: the late model better on dev (of ``colbert`` and ``xtr``) re-scoring the top 100
  of the dense fine-tune and of BM25 (pyserini Lucene, k1 0.9, b 0.4) from its stored token vectors.

The arm to report is the best on dev; test and the six classic collections choose nothing. The criteria are fixed in
RESULTS.md ("Late interaction") before any arm ran.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
from late_interaction_report import tables

from embedkit import EvaluateOptions, RerankSettings, evaluate, load_dataset, load_model
from embedkit.evaluation.compare import compare_runs
from embedkit.search import BM25, Dense, LateInteraction
from embedkit.train import TrainConfig, train

BEIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "beir"
TRANSFER = ("cranfield", "cisi", "medline", "cacm", "npl", "lisa")
DOCUMENT_TOKENS = 256
DEPTH = 100  # a reranker's first-stage depth
BM25_SPEC = BM25(backend="pyserini")
MODELS = {"colbert": "colbert", "xtr": "xtr"}  # trained model: its scoring
RETRIEVERS = {"colbert": ("colbert", None), "colbert+pool2": ("colbert", 2.0), "xtr": ("xtr", None)}
RERANKS = {"rerank:bm25": "bm25", "rerank:dense": "dense"}


def metrics_of(report: dict) -> dict[str, float]:
    return {key: report["metrics"][key] for key in ("ndcg_at_10", "recall_at_100")}


def score(model, spec, folder: Path, cache: Path, reports: Path, name: str, reranker=None) -> dict:
    """Dev and test nDCG@10 and recall@100 (the test report kept for ``compare``)."""
    row: dict = {}
    options = EvaluateOptions(overwrite=True, reranker=reranker)
    for split in ("dev", "test"):
        start = time.perf_counter()
        report = evaluate(model, folder, split, spec, output=reports / name, cache_dir=cache, options=options)
        row |= {f"{split}_{key}": value for key, value in metrics_of(report).items()}
        row |= {f"{split}_report": report["folder"], f"{split}_s": round(time.perf_counter() - start, 1)}
        row["retrieval"] = report["retrieval"]
    return row


def transfer(model, spec, cache: Path, reranker=None) -> dict:
    """Test nDCG@10 on the six classic collections and their mean."""
    options = EvaluateOptions(overwrite=True, reranker=reranker)
    scores = {c: evaluate(model, BEIR / c, "test", spec, cache_dir=cache, options=options)["metrics"]["ndcg_at_10"]
              for c in TRANSFER}  # fmt: skip
    return {**scores, "mean": float(np.mean(list(scores.values())))}


def model_config(name: str, output: Path, finetune: Path) -> TrainConfig:
    """The model's training settings (shared with ``reproduce_training.py``)."""
    return TrainConfig(
        output=str(output / "models" / name),
        objective="colbert",
        scoring=MODELS[name],
        projection_dim=128,
        data=str(finetune / "mined.jsonl"),
        num_negatives=1,
        drop_short_examples=True,
        batch_size=32,
        epochs=3,
        learning_rate=3e-5,
        max_length=128,
        precision="bf16",
        save_steps=10_000,
        save_total_limit=1,
        resume=None,
    )


def train_model(name: str, output: Path, finetune: Path) -> dict:
    config = model_config(name, output, finetune)
    trained = Path(config.output)
    if not (trained / "embedkit_training.json").is_file():  # a finished run is scored, not trained again
        train(config)
    record = json.loads((trained / "embedkit_training.json").read_text())
    keys = ("steps", "train_seconds", "train_loss", "loss_history", "base_model")
    return {key: record.get(key) for key in keys}


def late_model(output: Path, name: str, pool_factor: float | None = None):
    return load_model(output / "models" / name, max_length=DOCUMENT_TOKENS, pool_factor=pool_factor)


def chosen_late_model(results: dict) -> str:
    """The trained late-interaction model with the better dev nDCG@10 as a retriever (test never looked at)."""
    return max(MODELS, key=lambda name: results[name]["dev_ndcg_at_10"])


def arms_stage(results: dict, output: Path, finetune: Path, save) -> None:
    folder, cache, reports = finetune / "scifact-dev", finetune / "cache", output / "reports"
    for name in MODELS:
        if f"train:{name}" not in results:
            results[f"train:{name}"] = train_model(name, output, finetune)
            save()
    for name, (trained, pool_factor) in RETRIEVERS.items():
        if name not in results:
            model = late_model(output, trained, pool_factor)
            results[name] = score(model, LateInteraction(), folder, cache, reports, name)
            save()
            print(name, {k: v for k, v in results[name].items() if k.endswith("ndcg_at_10")}, flush=True)
    if "bm25" not in results:
        results["bm25"] = score(None, BM25_SPEC, folder, cache, reports, "bm25")
        save()
    reranker = chosen_late_model(results)
    results["choices"] = {"late_model": reranker}
    settings = RerankSettings(str(output / "models" / reranker), depth=DEPTH, max_length=DOCUMENT_TOKENS)
    for name, first in RERANKS.items():
        if name in results:
            continue
        if first == "dense":
            recorded = json.loads((finetune / "result.json").read_text()).get("epochs-6-dev")
            if recorded is None:
                print("the dense fine-tune has not finished (finetune_scifact.py): run this stage again after it")
                return
            keys = ("dev_ndcg_at_10", "dev_recall_at_100", "test_ndcg_at_10", "test_recall_at_100", "test_report")
            results["dense"] = {key: recorded[key] for key in keys} | {"transfer": recorded["transfer"]}
            model, spec = load_model(finetune / "models" / "epochs-6-dev", max_length=DOCUMENT_TOKENS), Dense()
        else:
            model, spec = None, BM25_SPEC
        results[name] = score(model, spec, folder, cache, reports, name, reranker=settings) | {"model": reranker}
        save()
        print(name, {k: v for k, v in results[name].items() if k.endswith("ndcg_at_10")}, flush=True)
    arms = [*RETRIEVERS, *RERANKS]
    chosen = max(arms, key=lambda name: results[name]["dev_ndcg_at_10"])
    results["choices"] |= {"arm": chosen}
    pairs = [*(("dense", name) for name in arms), ("bm25", "rerank:bm25")]
    results["compare"] = {
        f"{a} vs {b}": compare_runs([results[a]["test_report"], results[b]["test_report"]])["comparisons"][0]["tests"]
        for a, b in pairs
    }
    save()


def transfer_stage(results: dict, output: Path, finetune: Path, save) -> None:
    """The six classic collections for each arm but ``colbert+pool2`` (a storage choice), after every SciFact score:
    the dev-chosen late model's retriever and second stages first."""
    cache, late = finetune / "cache", results["choices"]["late_model"]
    reranker = RerankSettings(str(output / "models" / late), depth=DEPTH, max_length=DOCUMENT_TOKENS)
    order = [late, "bm25", "rerank:bm25", "rerank:dense", *(name for name in MODELS if name != late)]
    for name in order:
        if name not in results or "transfer" in results[name]:
            continue
        if name in MODELS:
            model, spec, second = late_model(output, name), LateInteraction(), None
        elif name.endswith("dense"):
            model = load_model(finetune / "models" / "epochs-6-dev", max_length=DOCUMENT_TOKENS)
            spec, second = Dense(), reranker
        else:
            model, spec, second = None, BM25_SPEC, reranker if name.startswith("rerank") else None
        results[name]["transfer"] = transfer(model, spec, cache, second)
        save()
        print(name, "transfer", results[name]["transfer"]["mean"], flush=True)


def _bytes(folder: Path, pattern: str = "*") -> int:
    return sum(path.stat().st_size for path in folder.rglob(pattern) if path.is_file())


def _timed(make):
    start = time.perf_counter()
    made = make()
    return made, time.perf_counter() - start


def library_agreement(model_folder: Path, data, queries: dict[str, str], run: dict, queries_checked: int) -> dict:
    """For the first ``queries_checked`` test queries: sentence-transformers' ``MultiVectorEncoder`` and ``maxsim``
    (float32) re-rank the top 30 of embedkit's exact run, and their top 10 is compared with embedkit's own MaxSim
    of the same candidates encoded by ``load_model`` (float32 token vectors)."""
    from sentence_transformers.multi_vector_encoder import MultiVectorEncoder, maxsim

    from embedkit.multivector import maxsim as embedkit_maxsim

    reference = MultiVectorEncoder(str(model_folder))
    reference[0].document_length = DOCUMENT_TOKENS
    ours = load_model(model_folder, max_length=DOCUMENT_TOKENS, token_dtype="float32")
    query_ids = list(queries)[:queries_checked]
    same = 0
    for query_id in query_ids:
        candidates = list(run[query_id])[:30]
        texts = data.documents(set(candidates))
        documents = [texts[doc] for doc in candidates]
        theirs = maxsim(reference.encode_query([queries[query_id]], convert_to_numpy=True),
                        reference.encode_document(documents, convert_to_numpy=True)).numpy()[0]  # fmt: skip
        mine = embedkit_maxsim(ours.encode_queries([queries[query_id]]), ours.encode_documents(documents))[0]
        same += list(np.argsort(-theirs, kind="stable")[:10]) == list(np.argsort(-mine, kind="stable")[:10])
    return {"queries": len(query_ids), "same_top10_order": same}


def costs_stage(results: dict, output: Path, finetune: Path, save) -> None:
    """The late model chosen on dev: bytes per document with and without pooling, build seconds and queries/s (search
    only, the 300 test queries encoded once beforehand) of the exact index and of the IVF at three settings, with
    its recall@10 against the exact top 10; the dense fine-tune's Flat index beside them."""
    from embedkit.search import DenseRetrieval, LateInteractionRetrieval

    data, cache = load_dataset(finetune / "scifact-dev"), finetune / "cache"
    queries = data.split_queries("test")
    ids, costs = list(queries), results.get("costs", {})
    name = results["choices"]["late_model"]
    for label, pool_factor in (("late", None), ("late+pool2", 2.0)):
        if label in costs:
            continue
        model = late_model(output, name, pool_factor)
        vectors = model.encode_queries(list(queries.values()))
        exact_retrieval = LateInteractionRetrieval(model, LateInteraction(), cache)
        embeddings = exact_retrieval.embeddings(data)
        row = {"document_tokens": exact_retrieval.document_tokens(data), "embeddings_bytes": _bytes(embeddings.path)}
        exact, row["exact_build_s"] = _timed(lambda: exact_retrieval.index(data))  # noqa: B023
        hits, seconds = _timed(lambda: exact.search(vectors, 10))  # noqa: B023
        row["exact_search_per_s"] = len(ids) / seconds
        reference = hits.ids
        ivf_retrieval = LateInteractionRetrieval(model, LateInteraction(index="ivf"), cache)
        ivf, row["ivf_build_s"] = _timed(lambda: ivf_retrieval.index(data))  # noqa: B023
        row["ivf_lists"], row["ivf"] = ivf.ivf.nlist, []
        for nprobe, candidates in ((4, 32), (16, 64), (32, 128)):
            ivf.set_search_params(nprobe, candidates)
            found, seconds = _timed(lambda: ivf.search(vectors, 10))  # noqa: B023
            recall = np.mean([len(set(r) & set(f)) / max(len(r), 1) for r, f in zip(reference, found.ids)])
            row["ivf"].append({"nprobe": nprobe, "candidates": candidates, "recall_at_10_vs_exact": float(recall),
                               "search_per_s": len(ids) / seconds})  # fmt: skip
        if pool_factor is None:
            run = hits.to_run(ids)
            row["library_agreement"] = library_agreement(output / "models" / name, data, queries, run, 50)
        costs[label] = row
        results["costs"] = costs | {"queries": len(ids), "threads": os.environ.get("OMP_NUM_THREADS")}
        save()
    if not (finetune / "models" / "epochs-6-dev").is_dir():
        print("the dense fine-tune has not finished (finetune_scifact.py): run this stage again after it")
        return
    dense_model = load_model(finetune / "models" / "epochs-6-dev", max_length=DOCUMENT_TOKENS)
    dense = DenseRetrieval(dense_model, Dense(), cache)
    embeddings = dense.embeddings(data)
    index, build_s = _timed(lambda: dense.index(data))
    query_vectors = dense_model.encode_queries(list(queries.values()))
    _, seconds = _timed(lambda: index.search(query_vectors, 10))
    costs["dense"] = {"bytes_per_document": dense_model.dim * 4, "embeddings_bytes": _bytes(embeddings.path),
                      "flat_build_s": build_s, "flat_search_per_s": len(ids) / seconds}  # fmt: skip
    results["costs"] = costs | {"queries": len(ids), "threads": os.environ.get("OMP_NUM_THREADS")}
    save()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="runs/late")
    parser.add_argument("--finetune", default="runs/finetune", help="the dense fine-tune study's output folder")
    parser.add_argument("--stage", choices=["arms", "costs", "transfer"], action="append", default=[])
    parser.add_argument("--table", action="store_true")
    args = parser.parse_args()
    output, finetune = Path(args.output), Path(args.finetune)
    output.mkdir(parents=True, exist_ok=True)
    path = output / "result.json"
    results = json.loads(path.read_text()) if path.is_file() else {}

    def save() -> None:
        path.write_text(json.dumps(results, indent=2))

    if "arms" in args.stage:
        arms_stage(results, output, finetune, save)
    if "costs" in args.stage:
        costs_stage(results, output, finetune, save)
    if "transfer" in args.stage:
        transfer_stage(results, output, finetune, save)
    print(tables(results))


if __name__ == "__main__":
    main()
