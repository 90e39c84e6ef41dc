"""A report folder: ``report.json``, ``report.md``, ``report.html``, ``per_query.json`` and the TREC ``run.trec``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedkit.protocols import Run
from embedkit.report.html import render_comparison_html, render_report_html, run_name
from embedkit.search.trec import write_run
from embedkit.storage import write_json, write_text


def _table(rows: list[tuple[str, Any]], header: tuple[str, str]) -> list[str]:
    lines = [f"| {header[0]} | {header[1]} |", "| --- | --- |"]
    lines += [f"| {key} | {value} |" for key, value in rows]
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    dataset, model, retriever = report["dataset"], report.get("model") or {}, report["retriever"]
    title = f"# {dataset['name']} ({dataset['split']}): {run_name(report)}"
    metrics = [(name, f"{value:.4f}") for name, value in report["metrics"].items()]
    settings = [(f"model.{k}", f"`{v!r}`") for k, v in model.items()]
    settings += [(f"retriever.{k}", f"`{v!r}`") for k, v in retriever.items()]
    settings += [
        ("dataset.documents", dataset["documents"]),
        ("dataset.queries", dataset["queries"]),
        ("dataset.doc_text", f"`{dataset['doc_text']}`"),
        ("device", report.get("device")),
    ]
    lines = [title, "", "## Metrics", "", *_table(metrics, ("metric", "value")), ""]
    for name, component in (report.get("component_metrics") or {}).items():
        rows = [(metric, f"{value:.4f}") for metric, value in component.items()]
        lines += [f"## Metrics of the {name} run alone", "", *_table(rows, ("metric", "value")), ""]
    lines += ["## Settings", "", *_table(settings, ("setting", "value")), ""]
    lines += ["## Timings (s)", "", *_table(list(report["timings_s"].items()), ("stage", "seconds")), ""]
    versions = list(report["library_versions"].items())
    lines += ["## Library versions", "", *_table(versions, ("package", "version")), ""]
    return "\n".join(lines)


def write_report(folder: str | Path, report: dict[str, Any], run: Run, per_query: dict[str, dict[str, float]]) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_run(folder / "run.trec", run)
    write_json(folder / "per_query.json", per_query)
    write_json(folder / "report.json", {**report, "folder": str(folder)})
    write_text(folder / "report.md", render_markdown(report))
    write_text(folder / "report.html", render_report_html(report, per_query))
    return folder


def write_comparison(folder: str | Path, result: dict[str, Any]) -> Path:
    """``compare.json`` and ``compare.md`` of an ``embedkit compare`` into ``folder``."""
    from embedkit.evaluation.compare import render_comparison_markdown

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "compare.json", result)
    write_text(folder / "compare.md", render_comparison_markdown(result))
    write_text(folder / "report.html", render_comparison_html(result))
    return folder
