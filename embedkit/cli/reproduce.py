"""``embedkit reproduce``: run the published conditions that can run here and check the scores."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embedkit.cli import options as opt


def reproduce(
    config: Annotated[
        Optional[Path], typer.Option(help="Reproduction YAML (default: the table packaged with embedkit).")
    ] = None,
    only: Annotated[
        Optional[list[str]], typer.Option("--only", help="Run only this condition id (repeatable).")
    ] = None,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Folder for each condition's report and the table.")
    ] = Path("runs/reproduce"),
    data_dir: opt.DataDir = None,
    cache_dir: Annotated[Optional[Path], typer.Option(help="Where embeddings and Lucene indexes are cached.")] = None,
    list_only: Annotated[bool, typer.Option("--list", help="List the conditions and exit.")] = False,
) -> None:
    """Expected vs measured for every condition that can run here; exits 1 if a row fails its tolerance.

    Example: [bold]embedkit reproduce --only bm25-flat.scifact --only all-minilm-l6-v2.scifact[/bold]
    """
    from embedkit.outputs import check_output_folder
    from embedkit.reproduce.conditions import load_conditions, select

    conditions, meta = load_conditions(config)  # a bad table or id is refused before torch is imported
    if list_only:
        for condition in conditions:
            typer.echo(f"{condition.id}: {condition.description}")
        return
    conditions = select(conditions, only, meta["path"])
    # the folder gathers one report folder per condition and the table: never someone else's
    check_output_folder(output, "reproduction", overwrite=True)
    from embedkit.reproduce.runner import run_conditions
    from embedkit.reproduce.table import render_reproduction_html, render_reproduction_markdown
    from embedkit.storage import write_json, write_text

    result = run_conditions(conditions, meta, output, data_dir, cache_dir)
    write_json(output / "reproduce.json", {"format": "embedkit.reproduction/1", **result})
    write_text(output / "reproduce.md", render_reproduction_markdown(result))
    write_text(output / "report.html", render_reproduction_html(result))
    typer.echo(render_reproduction_markdown(result))
    typer.echo(f"table written to {output / 'report.html'}")
    if any(row["status"] == "fail" for row in result["rows"]):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(reproduce)
