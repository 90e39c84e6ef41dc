"""A report folder: ``report.json``, ``report.md``, ``per_query.json`` and the TREC ``run.trec``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedkit.protocols import Run
from embedkit.search.trec import write_run
from embedkit.storage import write_json, write_text


def _table(rows: list[tuple[str, Any]], header: tuple[str, str]) -> list[str]:
    lines = [f"| {header[0]} | {header[1]} |", "| --- | --- |"]
    lines += [f"| {key} | {value} |" for key, value in rows]
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    dataset, model, retriever = report["dataset"], report["model"], report["retriever"]
    title = f"# {dataset['name']} ({dataset['split']}): {model['model']}"
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
    return folder
