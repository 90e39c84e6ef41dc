"""``embedkit merge``: interpolate a fine-tuned model with its base (WiSE-FT) or average checkpoints (a soup)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer


def merge(
    tuned: Annotated[
        list[str], typer.Option("--tuned", help="The fine-tuned model; several are averaged uniformly (a soup).")
    ],
    output: Annotated[str, typer.Option("--output", "-o", help="Folder to write (an ordinary model folder).")],
    base: Annotated[Optional[str], typer.Option(help="The model the fine-tune started from.")] = None,
    alpha: Annotated[
        Optional[str],
        typer.Option(
            help="Weight of the tuned model: (1-a)*base + a*tuned, a in [0, 1]; or auto: the smallest a on "
            "0, 0.1, ..., 1 whose dev nDCG@10 is within --tolerance of the best."
        ),
    ] = None,
    dev_dataset: Annotated[Optional[str], typer.Option(help="BEIR folder or name that --alpha auto scores.")] = None,
    dev_split: Annotated[str, typer.Option(help="Its qrels split.")] = "dev",
    dev_dtype: Annotated[str, typer.Option(help="float32 | bfloat16: autocast of the dev evaluation.")] = "float32",
    tolerance: Annotated[
        float, typer.Option(help="Dev nDCG@10 an auto alpha may give up for staying nearer the base.")
    ] = 0.005,
    data_dir: Annotated[Optional[str], typer.Option(help="Folder holding BEIR datasets by name.")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an earlier merge in OUTPUT.")] = False,
) -> None:
    """Write a model whose weights are made from others': [bold](1-a)*base + a*tuned[/bold] for every tensor, or the
    uniform average of several checkpoints. How it was made is recorded in embedkit_merge.json and the card.

    Example: [bold]embedkit merge --base all-MiniLM-L6-v2 --tuned models/ft --alpha auto --dev-dataset d -o m[/bold]
    """
    from embedkit.outputs import check_output_folder
    from embedkit.train.merge_settings import MERGED_KIND, MergeSettings, parse_alpha

    settings = MergeSettings(
        tuned=tuple(tuned),
        base=base,
        alpha=parse_alpha(alpha),
        dev_dataset=dev_dataset,
        dev_split=dev_split,
        dev_dtype=dev_dtype,
        tolerance=tolerance,
        data_dir=data_dir,
    )
    settings.check()
    check_output_folder(output, MERGED_KIND, overwrite)  # refused before torch loads
    from embedkit.train.merged_model import merge_models

    folder = merge_models(settings, output, overwrite=overwrite)
    typer.echo(f"merged model written to {folder}")


def register(app: typer.Typer) -> None:
    app.command()(merge)
