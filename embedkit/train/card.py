"""The section ``train`` adds to the model card: what the run did, its dev and transfer curves, how the saved weights
were made, and every setting."""

from __future__ import annotations

from typing import Any

from embedkit.train.merge import merge_summary
from embedkit.training.transfer import transfer_card_lines


def card_section(record: dict[str, Any]) -> str:
    config = record["config"]
    rows = [f"| {k} | `{v!r}` |" for k, v in config.items()]
    lines = [
        "",
        "## embedkit training",
        "",
        f"- objective: {config['objective']}; loss: {record['loss']}",
        f"- data: {record['data']}",
        f"- examples: {record['examples']}; steps: {record['steps']}; wall time: {record['train_seconds']:.0f} s",
    ]
    if record.get("evaluation"):
        evaluation = record["evaluation"]
        lines.append(
            f"- evaluation: {evaluation['dataset']} ({evaluation['split']}) nDCG@10 = {evaluation['ndcg_at_10']:.4f}"
        )
    if record.get("dev_curve"):
        best = record.get("best_checkpoint") or {}
        queries = len(record["dev_queries"] or []) or "the dev set's"
        lines += [
            "",
            f"Dev curve ({queries} queries; the best by nDCG@10 is step {best.get('step')}; the weights saved are "
            + ("made as below):" if record.get("weights") else f"step {best.get('step')}'s, the best by nDCG@10):"),
            "",
            "| step | dev nDCG@10 |",
            "| --- | --- |",
        ]
        lines += [f"| {point['step']} | {point['ndcg_at_10']:.4f} |" for point in record["dev_curve"]]
    weights = merge_summary(record.get("weights"))
    if weights:
        lines += ["", *weights]
    lines += transfer_card_lines(record.get("transfer"))
    lines += ["", "| setting | value |", "| --- | --- |", *rows, ""]
    return "\n".join(lines)
