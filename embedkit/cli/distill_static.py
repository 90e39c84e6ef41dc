"""``embedkit distill-static``: a sentence-transformers model distilled into a static (per-token vector) model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embedkit.cli import options as opt


def distill_static(
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder for the static model.")],
    model: opt.Model = None,
    pca_dims: Annotated[
        Optional[int], typer.Option(help="Dimensions kept by PCA (default 256; 0 keeps the teacher's).")
    ] = 256,
    sif_coefficient: Annotated[
        float, typer.Option(help="SIF weighting of frequent tokens (smaller: stronger); 0 turns it off.")
    ] = 1e-4,
    overwrite: opt.Overwrite = False,
) -> None:
    """Distil a model with model2vec into one vector per token; load it anywhere a model goes (--model OUT).

    Example: [bold]embedkit distill-static -o models/minilm-static --pca-dims 256[/bold]
    """
    from embedkit.models.reference import resolve_model
    from embedkit.models.static import STATIC_KIND, StaticSettings
    from embedkit.outputs import check_output_folder

    settings = StaticSettings(pca_dims or None, sif_coefficient or None).check()
    resolve_model(model)  # a missing folder or an uncached Hub name: one line before anything loads
    check_output_folder(output, STATIC_KIND, overwrite)
    from embedkit.models.static import distill_static as distill

    written = distill(model, output, settings, overwrite=overwrite)
    dims = settings.pca_dims or "the teacher's"
    typer.echo(f"static model ({dims} dimensions) written to {written}; use it with --model {written}")


def register(app: typer.Typer) -> None:
    app.command(name="distill-static")(distill_static)
