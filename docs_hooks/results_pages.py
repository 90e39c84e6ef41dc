"""The Results section: a page per committed benchmark JSON (results.yaml), its tables generated at build time."""

from __future__ import annotations

from pathlib import Path

import results_tables
import yaml

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = Path(__file__).with_name("results.yaml")


def entries() -> list[dict]:
    """The registry: one dict per results page (title, json, tables, command, date, cpu, about, verdict)."""
    return yaml.safe_load(REGISTRY.read_text())


def page(entry: dict) -> str:
    """One results page: what was asked, how it ran, the tables from its JSON and the verdict."""
    tables = getattr(results_tables, entry["tables"])(ROOT / entry["json"])
    lines = [f"# {entry['title']}", "", entry["about"], ""]
    lines += [f"- Command: `{' '.join(entry['command'].split())}`", f"- Date: {entry['date']}"]
    lines += [f"- CPU: {entry['cpu']}", f"- JSON: `{entry['json']}` (the tables below are generated from it)", ""]
    lines += [tables, ""]
    if entry.get("verdict"):
        lines += ["**Verdict.** " + entry["verdict"], ""]
    lines += ["The question, design, criteria and full verdicts of each study are in `benchmarks/RESULTS.md`.", ""]
    return "\n".join(lines)


def pages() -> dict[str, str]:
    out = {f"results/{entry['page']}.md": page(entry) for entry in entries()}
    index = [
        "# Results",
        "",
        "The current figure of each benchmark and study. A figure appears here only when a committed script produced",
        "it and its JSON is committed under `benchmarks/results/`; every table in this section is generated from that",
        "JSON when the site is built. Timings need an idle machine and compare only within one run.",
        "",
        "| page | JSON | date |",
        "| --- | --- | --- |",
    ]
    for entry in entries():
        index.append(f"| [{entry['title']}]({entry['page']}.md) | `{entry['json']}` | {entry['date'].split(',')[0]} |")
    index += ["", "Benchmarks without a committed JSON have no current figure; `benchmarks/RESULTS.md` lists how to"]
    index += ['rerun them ("To be rerun").']
    out["results/index.md"] = "\n".join(index) + "\n"
    return out


def nav() -> list:
    return ["results/index.md", *({entry["title"]: f"results/{entry['page']}.md"} for entry in entries())]
