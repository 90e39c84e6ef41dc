"""The reproduction table, expected vs measured with pass/fail per row, as Markdown and as report.html."""

from __future__ import annotations

from typing import Any

from embedkit.report.html import RawHtml, escape, page, table

HEADER = ("condition", "metric", "expected", "measured", "delta", "tolerance", "result", "source")


def _verdict(row: dict[str, Any], cell: dict[str, Any]) -> str:
    if row["status"] == "skipped":
        return f"skipped: {row['reason']}"
    return "pass" if cell["ok"] else "FAIL"


def _rows(result: dict[str, Any]) -> list[tuple[str, ...]]:
    rows = []
    for row in result["rows"]:
        for metric, cell in row["metrics"].items():
            measured = "-" if cell["measured"] is None else f"{cell['measured']:.4f}"
            delta = "-" if cell["measured"] is None else f"{cell['delta']:+.4f}"
            verdict = _verdict(row, cell)
            rows.append(
                (
                    row["id"],
                    metric,
                    f"{cell['expected']:.4f}",
                    measured,
                    delta,
                    f"±{row['tolerance']:g}",
                    verdict,
                    row["source"],
                )
            )
    return rows


def summary(result: dict[str, Any]) -> str:
    statuses = [row["status"] for row in result["rows"]]
    counts = {name: statuses.count(name) for name in ("pass", "fail", "skipped")}
    return f"{counts['pass']} passed, {counts['fail']} failed, {counts['skipped']} skipped (cannot run here)"


def render_reproduction_markdown(result: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in _rows(result)]
    lines += ["", summary(result), "", "Sources:"]
    lines += [f"- {key}: {source['title']} <{source['url']}>" for key, source in result["sources"].items()]
    return "\n".join(lines) + "\n"


def render_reproduction_html(result: dict[str, Any]) -> str:
    rows = []
    for row in _rows(result):
        verdict = row[6]
        css = "pass" if verdict == "pass" else "fail" if verdict == "FAIL" else "skip"
        rows.append((*row[:6], RawHtml(f'<span class="{css}">{escape(verdict)}</span>'), row[7]))
    sources = [(key, source["title"], source["url"]) for key, source in result["sources"].items()]
    sections = [
        f"<p>{escape(summary(result))}. Conditions from <code>{escape(result['config'])}</code>.</p>",
        table(HEADER, rows, "reproductions"),
        "<h2>Sources</h2>",
        table(("key", "title", "url"), sources, "sources"),
    ]
    return page("embedkit reproductions", sections)
