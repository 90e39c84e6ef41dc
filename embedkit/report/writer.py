"""A report folder: ``report.json``, ``report.md``, ``report.html``, ``per_query.json`` and the TREC ``run.trec``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from embedkit.data.trec import write_run
from embedkit.outputs import replace_folder
from embedkit.protocols import Run
from embedkit.report.html import render_comparison_html, render_report_html
from embedkit.report.markdown import render_comparison_markdown, render_markdown
from embedkit.storage import read_json, write_json, write_text

REPORT_FORMAT = "embedkit.report/1"
COMPARISON_FORMAT = "embedkit.comparison/1"


def write_report(
    folder: str | Path,
    report: dict[str, Any],
    run: Run,
    per_query: dict[str, dict[str, float]],
    overwrite: bool = False,
    attachments: Sequence[Callable[[Path], None]] = (),
) -> Path:
    """The report folder, written beside ``folder`` and swapped in whole (``attachments`` add files to it first).

    An existing folder is replaced when it is a report with the same settings hash (this command's own earlier
    output) or, with ``overwrite``, any report; a folder embedkit did not write is never replaced.
    """
    folder = Path(folder)

    def same_settings(existing: Path) -> bool:
        earlier = read_json(existing / "report.json")
        return isinstance(earlier, dict) and earlier.get("settings_sha256") == report.get("settings_sha256")

    with replace_folder(folder, "report", overwrite, replaceable=same_settings) as tmp:
        write_run(tmp / "run.trec", run)
        write_json(tmp / "per_query.json", per_query)
        write_json(tmp / "report.json", {**report, "folder": str(folder)})
        write_text(tmp / "report.md", render_markdown(report))
        write_text(tmp / "report.html", render_report_html(report, per_query))
        for attach in attachments:
            attach(tmp)
    return folder


def write_comparison(folder: str | Path, result: dict[str, Any], overwrite: bool = False) -> Path:
    """``compare.json``, ``compare.md`` and ``report.html`` of an ``embedkit compare``, as one folder."""
    folder = Path(folder)
    with replace_folder(folder, "comparison", overwrite) as tmp:
        write_json(tmp / "compare.json", {"format": COMPARISON_FORMAT, **result})
        write_text(tmp / "compare.md", render_comparison_markdown(result))
        write_text(tmp / "report.html", render_comparison_html(result))
    return folder
