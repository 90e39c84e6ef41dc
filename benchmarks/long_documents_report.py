"""The tables of ``long_documents_scifact.py``'s JSON, as RESULTS.md and the docs' Results page show them (``python
benchmarks/long_documents_scifact.py --table``). Light on purpose: the docs build imports it."""

from __future__ import annotations

TRANSFER = ("cranfield", "cisi", "medline", "cacm", "npl", "lisa")
LENGTHS = (128, 256)
METHODS = ("truncate", "window", "sentence", "late")
AGGREGATIONS = ("maxp", "firstp", "sump")
ARMS = [f"{method}@{length}" for length in LENGTHS for method in METHODS]


def _cell(value: float | None, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def arms_table(results: dict) -> str:
    header = ["arm", "dev MaxP", "dev FirstP", "dev SumP", "test nDCG@10", "test R@100", "transfer mean", "rows",
              "vectors MB", "encode doc/s"]  # fmt: skip
    lines = [_row(header), _row(["---"] * len(header))]
    for arm in ARMS:
        row = results.get(arm)
        if row is None:
            continue
        devs = [row[a]["dev_ndcg_at_10"] if a in row else None for a in AGGREGATIONS]
        if "maxp" not in row:
            devs = [row["dev_ndcg_at_10"], None, None]
        speed = results.get("costs", {}).get(arm, {}).get("documents_per_s")
        cost = row["cost"]
        cells = [arm, *(_cell(value) for value in devs), _cell(row["test_ndcg_at_10"]),
                 _cell(row["test_recall_at_100"], 3), _cell(row.get("transfer", {}).get("mean")),
                 f"{cost['rows']:,}", _cell(cost["vector_bytes"] / 1e6, 1), _cell(speed, 1)]  # fmt: skip
        lines.append(_row(cells))
    return "\n".join(lines)


def compare_table(results: dict) -> str:
    """Each paired test as ``B vs A``: B's nDCG@10 less A's on the 300 test queries."""
    lines = [_row(["B vs A", "B - A", "p", "95 % CI", "wins / losses"]), _row(["---"] * 5)]
    for pair, tests in results.get("compare", {}).items():
        t = tests["ndcg_at_10"]
        ci = f"[{t['bootstrap_ci_low']:+.4f}, {t['bootstrap_ci_high']:+.4f}]"
        lines.append(_row([pair, f"{t['delta']:+.4f}", f"{t['randomization_p_value']:.4f}", ci,
                           f"{t['wins']} / {t['losses']}"]))  # fmt: skip
    return "\n".join(lines)


def transfer_table(results: dict) -> str:
    lines = [_row(["arm", *TRANSFER, "mean"]), _row(["---"] * (len(TRANSFER) + 2))]
    for arm in ARMS:
        scores = results.get(arm, {}).get("transfer")
        if scores:
            lines.append(_row([arm, *(_cell(scores[name]) for name in [*TRANSFER, "mean"])]))
    return "\n".join(lines)


def finetuned_line(results: dict) -> str:
    row = results.get("finetuned")
    if not row:
        return "The fine-tuned model has not been scored yet."
    choice, t = results["choice"], row["compare"]["ndcg_at_10"]
    return (
        f"The fine-tuned model (`epochs-6-dev`) under {choice['arm']} + {choice['aggregation']}: dev "
        f"{row['dev_ndcg_at_10']:.4f}, test {row['test_ndcg_at_10']:.4f}, against its truncation at 256: dev "
        f"{row['truncate@256']['dev_ndcg_at_10']:.4f}, test {row['truncate@256']['test_ndcg_at_10']:.4f} "
        f"(test {t['delta']:+.4f}, p {t['randomization_p_value']:.4f})."
    )


def tables(results: dict) -> str:
    choice = results.get("choice")
    chosen = "" if not choice else f"Chosen on dev: {choice['arm']} + {choice['aggregation']}.\n\n"
    parts = [arms_table(results), chosen + compare_table(results), transfer_table(results), finetuned_line(results)]
    return "\n\n".join(parts)


def _test(results: dict, pair: str) -> dict:
    t = results["compare"][pair]["ndcg_at_10"]
    return {"delta": t["delta"], "p": t["randomization_p_value"]}


def verdicts(results: dict) -> dict:
    """The criteria fixed in RESULTS.md before the run, judged from the JSON (``met`` is None until measured)."""
    out: dict = {}
    if "compare" in results:
        moonshot = _test(results, "chosen vs truncate@256")
        out["moonshot"] = {**moonshot, "met": moonshot["delta"] >= 0.010 and moonshot["p"] < 0.05}
        pays = _test(results, "window@128 vs truncate@128")
        out["chunking_pays_at_128"] = {**pays, "met": pays["delta"] > 0 and pays["p"] < 0.05}
        late = {f"at_{n}": _test(results, f"late@{n} vs window@{n}") for n in LENGTHS}
        out["late_beats_windows"] = {**late, "met": all(t["delta"] >= 0 for t in late.values())}
    transfer = results.get("choice", {}).get("transfer")
    if transfer and "transfer" in results.get("truncate@256", {}):
        baseline = results["truncate@256"]["transfer"]["mean"]
        out["transfers"] = {"chosen": transfer["mean"], "truncate@256": baseline,
                            "met": transfer["mean"] >= baseline - 0.005}  # fmt: skip
    if "finetuned" in results:
        t = results["finetuned"]["compare"]["ndcg_at_10"]
        out["finetune_keeps_the_gain"] = {"delta": t["delta"], "p": t["randomization_p_value"], "met": t["delta"] >= 0}
    return out
