"""The tables of each committed benchmark JSON, as Markdown. One function per file, named in results.yaml.

Where a benchmark ships its own table code (`benchmarks/sparse_report.py`, `benchmarks/late_interaction_report.py`)
it is called as is, so the site shows what RESULTS.md shows.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
TRANSFER = ("cacm", "cisi", "cranfield", "lisa", "medline", "npl")


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


def _f(value, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _benchmark_module(name: str):
    if str(BENCHMARKS) not in sys.path:
        sys.path.append(str(BENCHMARKS))
    return __import__(name)


def _peer_label(peer: str) -> str:
    """`sentence-transformers-bf16` as RESULTS.md heads its column: `ST bf16` (the plain one is `ST fp32`)."""
    rest = peer.removeprefix("sentence-transformers").lstrip("-")
    return f"ST {rest or 'fp32'}"


def encode(path: Path) -> str:
    data = json.loads(path.read_text())
    encoders = data["encoders"]
    peers = list(dict.fromkeys(peer for row in encoders.values() for peer in row["ratio_to"]))
    short = {peer: "x " + _peer_label(peer) for peer in peers}
    header = ["encoder", "precision", "texts/s", *short.values(), "min cos vs ST fp32", "min cos vs ST same precision"]
    rows = []
    for name, row in encoders.items():
        cos, same = row.get("cosine_vs_st_fp32", {}), row.get("cosine_vs_st_same_precision", {})
        label = f"{name} (batch {row['st_batch_size']})" if "st_batch_size" in row else name
        rows.append(
            [
                label,
                row["precision"],
                _f(row["median_docs_per_s"], 1),
                *(_f(row["ratio_to"].get(peer), 2) for peer in peers),
                _f(cos.get("min"), 6),
                _f(same.get("min"), 6),
            ]
        )
    ndcg = [[name, _f(row["ndcg_at_10"])] for name, row in encoders.items() if "ndcg_at_10" in row]
    text = _table(header, rows)
    if ndcg:
        text += "\n\nnDCG@10 on SciFact test (the whole corpus, exact inner product):\n\n"
        text += _table(["encoder", "nDCG@10"], ndcg)
    return text


def encode_budget(path: Path) -> str:
    data = json.loads(path.read_text())
    medians = data["median_texts_per_s"]
    budgets = sorted({int(key.rsplit(" ", 1)[1]) for key in medians if key.startswith("embedkit")})
    rows = [["sentence-transformers, batch 16", *(_f(medians[f"sentence-transformers {p}"], 1) for p in PRECISIONS)]]
    for budget in budgets:
        label = f"{budget:,}" + (" (chosen)" if budget == data["best_budget"] else "")
        rows.append([label, *(_f(medians[f"embedkit {p} {budget}"], 1) for p in PRECISIONS)])
    return _table(["budget (padded tokens)", *PRECISIONS], rows)


PRECISIONS = ("float32", "bfloat16")


def install_size(path: Path) -> str:
    targets = json.loads(path.read_text())["targets"]

    def largest(added: dict) -> str:
        top = sorted(added.items(), key=lambda item: -item[1]["mb"])[:3]
        return ", ".join(f"{name} {row['mb']:.1f}" for name, row in top)

    core = targets["core"]
    rows = [
        ["`torch==2.13.0` (the CPU build)", "", _f(core["torch_mb"], 1), largest(core["torch"])],
        ["`.` (core)", f"{core['site_packages_mb']:,.1f}", f"{core['added_over_torch_mb']:,.1f}",
         largest(core["added_over_torch"])],
    ]  # fmt: skip
    extras = sorted((name for name in targets if name != "core"), key=lambda n: -targets[n]["added_over_core_mb"])
    for name in extras:
        row = targets[name]
        rows.append(
            [f"`.[{name}]`", f"{row['site_packages_mb']:,.1f}", _f(row["added_over_core_mb"], 1),
             largest(row["added_over_core"])]
        )  # fmt: skip
    return _table(["install", "site-packages MB", "added MB", "largest additions (MB)"], rows)


def domain_adaptation(path: Path) -> str:
    """The study script's own summary table (the first table of its generated summary.md)."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


def finetune(path: Path) -> str:
    data = json.loads(path.read_text())
    base = data["base"]["transfer"]["mean"]
    arms = ["base", "baseline", *(f"epochs-6-dev{suffix}" for suffix in ("", "+wise-ft", "+soup", "+soup+wise-ft"))]
    header = ["model", "chosen on dev", "SciFact dev", "SciFact test", "transfer mean (vs base)", *TRANSFER]
    rows = []
    for arm in arms:
        row = data[arm]
        chosen = []
        if row.get("best_checkpoint"):
            chosen.append(f"step {row['best_checkpoint']['step']}")
        if row.get("soup_checkpoints"):
            chosen.append(f"soup of {len(row['soup_checkpoints'])}")
        if row.get("alpha") is not None:
            chosen.append(f"alpha {row['alpha']:g}")
        mean = row["transfer"]["mean"]
        vs = "" if arm == "base" else f" ({mean - base:+.4f})"
        rows.append(
            [arm, ", ".join(chosen) or "-", _f(row["dev_ndcg_at_10"]), _f(row["test_ndcg_at_10"]),
             _f(mean) + vs, *(_f(row["transfer"][name]) for name in TRANSFER)]
        )  # fmt: skip
    paired = []
    for a, against in data["compare:epochs-6-dev"].items():
        for b, metrics in against.items():
            m = metrics["ndcg_at_10"]
            paired.append(
                [a, b, f"{m['delta']:+.4f}", f"{m['randomization_p_value']:.4g}",
                 f"[{m['bootstrap_ci_low']:+.4f}, {m['bootstrap_ci_high']:+.4f}]", f"{m['wins']} / {m['losses']}"]
            )  # fmt: skip
    text = _table(header, rows)
    text += "\n\nPaired on SciFact test (nDCG@10; randomisation p, 95 % bootstrap interval, wins/losses):\n\n"
    return text + _table(["A", "B", "B - A", "p", "95 % CI", "wins / losses"], paired)


def sparse(path: Path) -> str:
    return _benchmark_module("sparse_report").tables(json.loads(path.read_text()))


def late_interaction(path: Path) -> str:
    return _benchmark_module("late_interaction_report").tables(json.loads(path.read_text()))


def living_index(path: Path) -> str:
    data = json.loads(path.read_text())
    flat, ivf = data["changes"]["Flat"], data["changes"]["IVF64,Flat"]
    changes = [
        ["Flat", f"{flat['documents']:,}", f"top-10 ids equal: {flat['ids_equal']}; largest score difference "
         f"{flat['max_score_difference']:g}", str(flat["check"]), f"{flat['seconds_for_changes']:.2f} s"],
        ["`IVF64,Flat`, quantizer kept", f"{ivf['documents']:,}", f"recall@10 {ivf['recall_at_10']:.3f} (an IVF "
         f"trained on the final documents: {ivf['fresh_build_recall_at_10']:.3f})", str(ivf["check"]),
         f"{ivf['seconds_for_changes']:.2f} s"],
    ]  # fmt: skip
    indexes = list(data["filters"])
    selectivities = list(data["filters"][indexes[0]])
    rows = []
    for name in selectivities:
        first = data["filters"][indexes[0]][name]
        cells = [
            f"{c['queries_per_second']:,.0f} / {c['recall_at_10']:.3f} / {c['hits_per_query']:g}"
            for c in (data["filters"][index][name] for index in indexes)
        ]
        rows.append([name, f"{first['documents']:,}", *cells])
    text = _table(["index", "documents", "against the exact rebuild", "check", "changes took"], changes)
    text += "\n\nFilters (each cell: queries/s / recall@10 against exact search over the matching documents / hits"
    text += " per query):\n\n"
    return text + _table(["documents kept", "count", *indexes], rows)


def long_documents(path: Path) -> str:
    return _benchmark_module("long_documents_report").tables(json.loads(path.read_text()))


def plaid(path: Path) -> str:
    """The compressed late-interaction index against exact MaxSim: one row per setting."""
    data = json.loads(path.read_text())
    exact = data["exact"]
    rows = [["exact MaxSim (float16)", "", "", "1", _f(exact["ndcg_at_10"]), _f(data["exact_queries_per_s_1"], 1),
             _f(data["exact_queries_per_s_2"], 1), f"{exact['bytes_per_document']:,.0f} (1)"]]  # fmt: skip
    seen = set()
    for i, row in enumerate([data["defaults"], *data["grid"]]):
        key = (row["bits"], row["nprobe"], row["candidates"])
        if key in seen:
            continue
        seen.add(key)
        rows.append([f"{row['bits']}{' (default)' if i == 0 else ''}", str(row["nprobe"]), str(row["candidates"]),
                     _f(row["recall_at_10_vs_exact"], 3), _f(row["ndcg_at_10"]), _f(row["queries_per_s_1"], 1),
                     _f(row["queries_per_s_2"], 1),
                     f"{row['bytes_per_document']:,.0f} ({row['storage_vs_float16']:.3f})"])  # fmt: skip
    header = ["bits", "nprobe", "candidates", "recall@10 vs exact", "nDCG@10", "queries/s, 1 thread", "2 threads",
              "bytes/doc (share of float16)"]  # fmt: skip
    return _table(header, rows)


def reproduce(path: Path) -> str:
    """Each retrained arm's test scores by each commit's code, beside the study's committed figure."""
    data = json.loads(path.read_text())
    rows = []
    for arm in ("colbert", "splade"):
        entry = data[arm]
        for commit, scores in entry["scored_by"].items():
            rows.append([arm, commit[:7], _f(scores["test_ndcg_at_10"]), _f(scores["test_recall_at_100"]),
                         _f(entry["committed"]["test_ndcg_at_10"])])  # fmt: skip
    return _table(["arm", "code", "nDCG@10", "recall@100", "study's committed nDCG@10"], rows)


def reproduce_training(path: Path) -> str:
    """Each arm's first steps trained by each commit's code: the weights' digest and the logged loss."""
    data = json.loads(path.read_text())
    rows = []
    for arm in ("splade", "colbert"):
        for commit, run in data[arm]["trained_by"].items():
            rows.append([arm, str(data[arm]["steps"]), commit[:7], run["weights_sha256"][:16],
                         _f(run["loss_history"][-1], 6), "yes" if data[arm]["codes_agree"] else "no"])  # fmt: skip
    return _table(["arm", "steps", "code", "weights sha256 (first 16)", "last logged loss", "codes agree"], rows)


def maxsim(path: Path) -> str:
    """Exact MaxSim's and the multiply's GFLOP/s per thread count, and the exact index's queries/s."""
    data = json.loads(path.read_text())
    rows = []
    for threads in (1, 2):
        run = data[f"threads_{threads}"]
        rows.append([str(threads), _f(run["gflops"]["multiply"], 1), _f(run["gflops"]["maxsim"], 1),
                     f"{run['maxsim_share_of_multiply']:.0%}", _f(run["exact_index_queries_per_s"], 1)])  # fmt: skip
    header = ["threads", "multiply GFLOP/s", "MaxSim GFLOP/s", "MaxSim / multiply", "exact index queries/s"]
    return _table(header, rows)


def sparse_diagnosis(path: Path) -> str:
    """Each short run before and after its fix: the last logged ranking loss against chance, and the dev win rate."""
    data = json.loads(path.read_text())
    rows = []
    for name, run in data["rows"].items():
        ranking = run["loss_terms"][-1].get("base_loss") if run["loss_terms"] else None
        table = run.get("query_table")
        spread = f"{_f(table['min'], 3)} to {_f(table['max'], 3)} (the {_f(table['the'], 3)})" if table else ""
        ranking = _f(ranking, 3) if ranking is not None else ""
        active = _f(run["vocabulary_active_in_every_document"], 3)
        rows.append([name, str(run["steps"]), ranking, _f(data["chance_loss"], 3), spread, active,
                     run["relevant_beats_random"]])  # fmt: skip
    header = ["run", "steps", "last ranking loss", "chance", "query weights ('the')", "vocabulary active in every doc",
              "relevant beats random (dev)"]  # fmt: skip
    return _table(header, rows)
