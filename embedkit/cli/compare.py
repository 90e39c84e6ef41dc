"""``embedkit compare``: report folders side by side, with paired significance against the first."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embedkit.cli import options as opt


def compare(
    runs: Annotated[list[Path], typer.Argument(help="Report folders written by 'embedkit evaluate'; the first is A.")],
    metric: Annotated[
        Optional[list[str]], typer.Option("--metric", help="Metric to test (repeatable; the first ranks queries).")
    ] = None,
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="Folder for compare.json, compare.md and report.html.")
    ] = None,
    resamples: Annotated[int, typer.Option(help="Resamples of the randomisation and bootstrap tests.")] = 10_000,
    seed: Annotated[int, typer.Option(help="Seed of the randomisation and bootstrap tests.")] = 0,
    top: Annotated[int, typer.Option(help="Queries listed among the biggest gains and losses.")] = 5,
    overwrite: opt.Overwrite = False,
) -> None:
    """Per-metric means, paired t-test, paired randomisation test, 95% bootstrap CI, win/tie/loss, per-query deltas.

    Example: [bold]embedkit compare runs/scifact__bm25__bm25s__test runs/scifact__all-MiniLM-L6-v2__Flat__test[/bold]
    """
    from embedkit.evaluation.compare import MAX_RESAMPLES, MAX_SEED
    from embedkit.outputs import check_output_folder

    opt.at_least(resamples, 1, "--resamples", maximum=MAX_RESAMPLES)
    opt.at_least(seed, 0, "--seed", maximum=MAX_SEED)
    opt.at_least(top, 0, "--top")
    if output is not None:
        check_output_folder(output, "comparison", overwrite)
    from embedkit.evaluation.compare import DEFAULT_METRICS, compare_runs
    from embedkit.report.markdown import render_comparison_markdown
    from embedkit.report.writer import write_comparison

    result = compare_runs(runs, metric or DEFAULT_METRICS, resamples=resamples, seed=seed, top=top)
    typer.echo(render_comparison_markdown(result))
    if output is not None:
        write_comparison(output, result, overwrite)
        typer.echo(f"comparison written to {output}")


def register(app: typer.Typer) -> None:
    app.command()(compare)
