"""The Markdown of a report and of a comparison: what the CLI prints and what ``report.md``/``compare.md`` hold."""

from __future__ import annotations

from typing import Any

from embedkit.report.html import run_name


def _table(rows: list[tuple[str, Any]], header: tuple[str, str]) -> list[str]:
    lines = [f"| {header[0]} | {header[1]} |", "| --- | --- |"]
    lines += [f"| {key} | {value} |" for key, value in rows]
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    dataset, model, retriever = report["dataset"], report.get("model") or {}, report["retriever"]
    title = f"# {dataset['name']} ({dataset['split']}): {run_name(report)}"
    metrics = [(name, f"{value:.4f}") for name, value in report["metrics"].items()]
    settings = [(f"model.{k}", f"`{v!r}`") for k, v in model.items()]
    settings += [(f"sparse_model.{k}", f"`{v!r}`") for k, v in (report.get("sparse_model") or {}).items()]
    settings += [(f"retriever.{k}", f"`{v!r}`") for k, v in retriever.items()]
    settings += [(f"retrieval.{k}", f"`{v!r}`") for k, v in (report.get("retrieval") or {}).items()]
    settings += [(f"reranker.{k}", f"`{v!r}`") for k, v in (report.get("reranker") or {}).items()]
    settings += [
        ("settings_sha256", f"`{report.get('settings_sha256')}`"),
        ("dataset.documents", dataset["documents"]),
        ("dataset.queries", dataset["queries"]),
        ("dataset.doc_text", f"`{dataset['doc_text']}`"),
        ("device", report.get("device")),
    ]
    lines = [title, "", "## Metrics", "", *_table(metrics, ("metric", "value")), ""]
    for name, component in (report.get("component_metrics") or {}).items():
        rows = [(metric, f"{value:.4f}") for metric, value in component.items()]
        lines += [f"## Metrics of the {name} run alone", "", *_table(rows, ("metric", "value")), ""]
    lines += _data_notes(report)
    lines += ["## Settings", "", *_table(settings, ("setting", "value")), ""]
    lines += ["## Timings (s)", "", *_table(list(report["timings_s"].items()), ("stage", "seconds")), ""]
    versions = list(report["library_versions"].items())
    lines += ["## Library versions", "", *_table(versions, ("package", "version")), ""]
    return "\n".join(lines)


def _ids(ids: list[str], shown: int = 10) -> str:
    return ", ".join(f"`{i}`" for i in ids[:shown]) + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def _data_notes(report: dict[str, Any]) -> list[str]:
    """What was scored and how: queries without results (scored 0), judged documents absent from the corpus, and the
    id and tie rules; a report written before these were recorded shows none of them."""
    rows: list[tuple[str, Any]] = []
    without = report.get("queries_without_results") or []
    if "queries_without_results" in report:
        rows.append(
            ("queries without results (scored 0)", f"{len(without)}" + (f": {_ids(without)}" if without else ""))
        )
    absent = report.get("absent_judged")
    if absent:
        told = f"{absent['documents']} (judged {absent['judgements']} times, {absent['relevant_judgements']} relevant)"
        told += f", scored as misses; first: {_ids(absent['first'])}" if absent["documents"] else ""
        rows.append((f"judged documents absent from the corpus (--absent-judged {absent['choice']})", told))
    for key, label in (("id_normalisation", "id normalisation"), ("tie_break", "ties")):
        if key in report:
            rows.append((label, report[key]))
    return ["## Data", "", *_table(rows, ("check", "result")), ""] if rows else []


def _p(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3e}"


def render_comparison_markdown(result: dict[str, Any]) -> str:
    """The comparison as Markdown tables: means, then significance of each run against the baseline."""
    metrics = result["metrics"]
    dataset = result["dataset"]
    lines = [f"# Comparison on {dataset['name']} ({dataset['split']}), {result['queries_compared']} queries", ""]
    lines += [f"**Note:** {warning}" for warning in result.get("warnings", [])]
    lines += [""] if result.get("warnings") else []
    lines += ["| run | " + " | ".join(metrics) + " |", "| --- |" + " --- |" * len(metrics)]
    for run in result["runs"]:
        lines.append(f"| {run['label']} | " + " | ".join(f"{run['means'][m]:.4f}" for m in metrics) + " |")
    lines += ["", f"## Significance against {result['baseline']} (B minus A)", ""]
    header = "| run B | metric | delta | t-test p | randomisation p | 95% bootstrap CI | win/tie/loss |"
    lines += [header, "| --- | --- | --- | --- | --- | --- | --- |"]
    for comparison in result["comparisons"]:
        for metric, test in comparison["tests"].items():
            lines.append(
                f"| {comparison['b']} | {metric} | {test['delta']:+.4f} | {_p(test['t_p_value'])} | "
                f"{_p(test['randomization_p_value'])} | [{test['bootstrap_ci_low']:+.4f}, "
                f"{test['bootstrap_ci_high']:+.4f}] | {test['wins']}/{test['ties']}/{test['losses']} |"
            )
    for comparison in result["comparisons"]:
        for title, rows in (("gained", comparison["biggest_gains"]), ("lost", comparison["biggest_losses"])):
            lines += ["", f"## Queries {comparison['b']} {title} most ({result['primary_metric']})", ""]
            lines += ["| query | A | B | delta |", "| --- | --- | --- | --- |"]
            lines += [f"| {r['query_id']} | {r['a']:.4f} | {r['b']:.4f} | {r['delta']:+.4f} |" for r in rows]
    settings = result["settings"]
    lines += ["", f"Tests: {settings['t_test']}; {settings['randomization_test']}; {settings['bootstrap']}; "]
    lines[-1] += f"{settings['resamples']} resamples, seed {settings['seed']}, scipy {settings['scipy']}."
    return "\n".join(lines) + "\n"
