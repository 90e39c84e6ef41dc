"""Transfer: how a model in training scores on collections it never trains on, beside its dev curve.

Fine-tuning on one domain can make a model worse everywhere else; the dev set, drawn from the same domain, cannot show
it. ``--transfer-dataset`` (any BEIR folder or name, repeatable) scores the model on other collections before training
(the base model), at every evaluation step and at the end (the weights saved), as sentence-transformers' NanoBEIR
evaluator does during training. The collections only watch: nothing is chosen by them, so their ``test`` split is the
default. Each is scored as the dev set is (``RetrievalEvaluator``: exact search, trec_eval's nDCG@10) at the training
max length and the dev dtype, so the figures are comparable along the run, not with a full ``embedkit evaluate``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from embedkit.training.config import collection_name
from embedkit.training.evaluator import RetrievalEvaluator

PREFIX = "transfer-"
METRIC = "ndcg_at_10"


def transfer_evaluators(
    datasets: Sequence[str], split: str, data_dir: str | None = None, dtype: str = "float32"
) -> list[RetrievalEvaluator]:
    """One evaluator per collection, named ``transfer-<name>`` so the Trainer's log keeps them apart from the dev
    set (which may be the same collection's other split)."""
    evaluators = []
    for dataset in datasets:
        evaluator = RetrievalEvaluator.of(dataset, split, data_dir, dtype=dtype)
        evaluator.name = PREFIX + collection_name(dataset)
        evaluators.append(evaluator)
    return evaluators


def with_mean(scores: dict[str, float]) -> dict[str, float]:
    return {**scores, "mean": sum(scores.values()) / len(scores)}


def transfer_scores(
    evaluators: Sequence[RetrievalEvaluator], score: Callable[[RetrievalEvaluator], dict[str, float]]
) -> dict[str, float] | None:
    """nDCG@10 per collection and their mean; ``score`` runs one evaluator on the model as it is now."""
    if not evaluators:
        return None
    return with_mean({evaluator.name.removeprefix(PREFIX): score(evaluator)[METRIC] for evaluator in evaluators})


def transfer_curve(log_history: list[dict[str, Any]], evaluators: Sequence[RetrievalEvaluator]) -> list[dict]:
    """The transfer scores the Trainer logged at each evaluation step (keys ``eval_transfer-<name>_ndcg_at_10``)."""
    keys = {evaluator.name.removeprefix(PREFIX): f"eval_{evaluator.name}_{METRIC}" for evaluator in evaluators}
    return [
        {"step": row["step"], **with_mean({name: row[key] for name, key in keys.items()})}
        for row in log_history
        if all(key in row for key in keys.values())
    ]


def curve_of_histories(watchers: Sequence[Any]) -> list[dict]:
    """The transfer curve from ``EncoderEvaluation`` callbacks (pretraining), one per collection, step by step."""
    rows: dict[int, dict[str, float]] = {}
    for watcher in watchers:
        for point in watcher.history:
            rows.setdefault(point["step"], {})[watcher.evaluator.name.removeprefix(PREFIX)] = point[METRIC]
    return [{"step": step, **with_mean(scores)} for step, scores in sorted(rows.items())]


def transfer_record(split: str, base: dict, curve: list[dict], final: dict) -> dict[str, Any]:
    return {"split": split, "metric": METRIC, "base": base, "curve": curve, "final": final}


def transfer_card_lines(transfer: dict[str, Any] | None) -> list[str]:
    """The card's transfer section: the base model's score on each collection beside the saved model's, then the
    curve."""
    if not transfer:
        return []
    base, final = transfer["base"], transfer["final"]
    lines = [
        "",
        f"Transfer: nDCG@10 on collections never trained on ({transfer['split']} split; training max length):",
        "",
        "| collection | base model | this model | change |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {name} | {base[name]:.4f} | {final[name]:.4f} | {final[name] - base[name]:+.4f} |" for name in final]
    if transfer["curve"]:
        names = list(transfer["curve"][0])[1:]
        lines += ["", "| step | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
        lines += [
            f"| {row['step']} | " + " | ".join(f"{row[n]:.4f}" for n in names) + " |" for row in transfer["curve"]
        ]
    return lines
