"""``report.html``: one self-contained page (inline CSS, plots as base64 PNG) that opens anywhere, offline.

Plots are ``matplotlib.figure.Figure`` objects saved straight to PNG: no display, no browser-side code, and the host
process's matplotlib backend and pyplot state stay as they were (a notebook keeps its inline plots).
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Sequence
from typing import Any

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 64em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; font-variant-numeric: tabular-nums; }
th { background: #f3f3f3; } td.num { text-align: right; }
.pass { color: #107010; font-weight: bold; } .fail { color: #b01010; font-weight: bold; } .skip { color: #777; }
img { max-width: 100%; } code { font-size: 0.9em; }
"""


def escape(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f'<td class="num">{value:.4f}</td>'
    if isinstance(value, RawHtml):
        return f"<td>{value}</td>"
    return f"<td>{escape(value)}</td>"


class RawHtml(str):
    """A table cell that is already HTML (e.g. a pass/fail badge)."""


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], table_id: str) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    return f'<table id="{escape(table_id)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def image(png: bytes, alt: str) -> str:
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'


def page(title: str, sections: Iterable[str]) -> str:
    body = "\n".join(sections)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{STYLE}</style></head>\n<body><h1>{escape(title)}</h1>\n{body}\n</body></html>\n"
    )


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return buffer.getvalue()


def _figure() -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 3.6))
    return fig, fig.subplots()


def recall_plot(curves: dict[str, dict[str, float]]) -> bytes:
    """Recall@k against k (log scale), one line per run."""
    fig, ax = _figure()
    for label, curve in curves.items():
        ks = [int(k) for k in curve]
        ax.plot(ks, list(curve.values()), marker="o", markersize=3, label=label)
    ax.set_xscale("log")
    ax.set(xlabel="k", ylabel="recall@k", ylim=(0, 1.02), title="Recall at k")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    return _png(fig)


def histogram_plot(values: Sequence[float], metric: str) -> bytes:
    """Distribution of a per-query metric; a mean hides how many queries score zero."""
    fig, ax = _figure()
    ax.hist(values, bins=20, range=(0, 1), color="#4a78b5", edgecolor="white")
    ax.set(xlabel=metric, ylabel="queries", title=f"Per-query {metric} ({len(values)} queries)")
    return _png(fig)


def delta_plot(deltas: Sequence[float], metric: str, label: str) -> bytes:
    """Per-query differences sorted: wins above zero, losses below."""
    fig, ax = _figure()
    ordered = sorted(deltas, reverse=True)
    colors = ["#2d8a34" if d > 0 else "#b03a2e" for d in ordered]
    ax.bar(range(len(ordered)), ordered, width=1.0, color=colors)
    ax.axhline(0, color="#444", linewidth=0.8)
    ax.set(xlabel="queries (sorted)", ylabel=f"delta {metric}", title=label)
    return _png(fig)


def _settings_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [(f"model.{k}", repr(v)) for k, v in (report.get("model") or {}).items()]
    rows += [(f"sparse_model.{k}", repr(v)) for k, v in (report.get("sparse_model") or {}).items()]
    rows += [(f"retriever.{k}", repr(v)) for k, v in report["retriever"].items()]
    rows += [(f"retrieval.{k}", repr(v)) for k, v in (report.get("retrieval") or {}).items()]
    rows += [("settings_sha256", str(report.get("settings_sha256")))]
    dataset = report["dataset"]
    rows += [(f"dataset.{k}", str(dataset[k])) for k in ("name", "split", "documents", "queries", "doc_text", "path")]
    rows += [("device", str(report.get("device")))]
    return rows


def run_name(report: dict[str, Any]) -> str:
    """What produced a run, for titles: the model's name, or the BM25 backend for a lexical run."""
    retriever = report["retriever"]
    name = f"BM25 ({retriever['backend']})" if retriever["type"] == "bm25" else report["model"]["model"]
    if report.get("sparse_model"):  # a hybrid's second model
        name = f"{name} + {report['sparse_model']['model']}"
    reranker = report.get("reranker")
    return name if reranker is None else f"{name}, reranked by {reranker['model']} (top {reranker['depth']})"


def render_report_html(report: dict[str, Any], per_query: dict[str, dict[str, float]]) -> str:
    """The evaluation report: metrics, settings, recall@k curve, per-query nDCG@10 distribution, versions."""
    dataset = report["dataset"]
    title = f"{dataset['name']} ({dataset['split']}): {run_name(report)}, {report['retriever']['type']}"
    components = report.get("component_metrics") or {}
    header = ("metric", "value") if not components else ("metric", report["retriever"]["type"], *components)
    metrics = [(name, value, *[c[name] for c in components.values()]) for name, value in report["metrics"].items()]
    sections = ["<h2>Metrics</h2>", table(header, metrics, "metrics")]
    curves = {report["retriever"]["type"]: report["recall_curve"]} if report.get("recall_curve") else {}
    curves.update(report.get("component_recall_curves") or {})
    if curves:
        sections += ["<h2>Recall at k</h2>", image(recall_plot(curves), "recall@k curve")]
    if per_query:
        scores = [row["ndcg_at_10"] for row in per_query.values()]
        sections += ["<h2>Per-query nDCG@10</h2>", image(histogram_plot(scores, "ndcg_at_10"), "per-query nDCG@10")]
    sections += ["<h2>Settings</h2>", table(("setting", "value"), _settings_rows(report), "settings")]
    sections += ["<h2>Timings (s)</h2>", table(("stage", "seconds"), list(report["timings_s"].items()), "timings")]
    versions = list(report["library_versions"].items())
    sections += ["<h2>Library versions</h2>", table(("package", "version"), versions, "versions")]
    return page(title, sections)


def _p(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3e}"


def render_comparison_html(result: dict[str, Any]) -> str:
    """The comparison: means, significance table, per-query deltas and the queries that moved most."""
    metrics, dataset = result["metrics"], result["dataset"]
    title = f"Comparison on {dataset['name']} ({dataset['split']}), {result['queries_compared']} queries"
    means = [(run["label"], *[run["means"][m] for m in metrics]) for run in result["runs"]]
    sections = ["<h2>Means</h2>", table(("run", *metrics), means, "means")]
    rows = []
    for comparison in result["comparisons"]:
        for metric, test in comparison["tests"].items():
            interval = f"[{test['bootstrap_ci_low']:+.4f}, {test['bootstrap_ci_high']:+.4f}]"
            wtl = f"{test['wins']}/{test['ties']}/{test['losses']}"
            p_values = (_p(test["t_p_value"]), _p(test["randomization_p_value"]))
            rows.append((comparison["b"], metric, f"{test['delta']:+.4f}", *p_values, interval, wtl))
    header = ("run B", "metric", "delta", "t-test p", "randomisation p", "95% bootstrap CI", "win/tie/loss")
    sections += [f"<h2>Significance against {escape(result['baseline'])} (B minus A)</h2>"]
    sections += [table(header, rows, "significance")]
    primary = result["primary_metric"]
    for number, comparison in enumerate(result["comparisons"]):
        label = f"{comparison['b']} minus {comparison['a']}"
        plot = delta_plot(list(comparison["per_query_delta"].values()), primary, label)
        sections += [f"<h2>Per-query {escape(primary)}: {escape(label)}</h2>", image(plot, f"per-query deltas {label}")]
        for kind in ("gains", "losses"):
            extremes = [(r["query_id"], r["a"], r["b"], r["delta"]) for r in comparison[f"biggest_{kind}"]]
            sections += [f"<h3>Biggest {kind}</h3>", table(("query", "A", "B", "delta"), extremes, f"{kind}-{number}")]
    settings = result["settings"]
    sections += ["<h2>Tests</h2>", table(("setting", "value"), [(k, str(v)) for k, v in settings.items()], "tests")]
    return page(title, sections)
