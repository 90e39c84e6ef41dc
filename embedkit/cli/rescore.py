"""``embedkit rescore``: a mined-negatives file scored by a cross-encoder teacher (and, with a ratio, filtered)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embedkit.cli import options as opt


def rescore(
    mined: Annotated[Path, typer.Option("--mined", help="A file written by 'embedkit mine'.")],
    teacher: Annotated[str, typer.Option(help="sentence-transformers CrossEncoder folder or Hub name.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Mined file to write (+ .meta.json).")],
    max_teacher_ratio: Annotated[
        Optional[float],
        typer.Option(help="Drop a negative whose teacher probability exceeds this share of the positive's, e.g. 0.95."),
    ] = None,
    teacher_max_length: Annotated[Optional[int], typer.Option(help="Tokens per (query, document) pair.")] = None,
    batch_size: Annotated[int, typer.Option(help="Pairs per forward pass (sorted by length).")] = 32,
    dtype: opt.Dtype = None,
    device: opt.Device = None,
    overwrite: opt.Overwrite = False,
) -> None:
    """Write the teacher's logits as 'scores' (what 'train --loss distill' reads), dropping likely false negatives.

    Example: [bold]embedkit rescore --mined mined.jsonl --teacher reranker --max-teacher-ratio 0.95 -o out.jsonl[/bold]
    """
    from embedkit.errors import EmbedkitError
    from embedkit.outputs import check_output_file
    from embedkit.reranking.settings import RerankSettings, resolve_cross_encoder
    from embedkit.train.mined import is_mined_file

    if max_teacher_ratio is not None and not 0 < max_teacher_ratio <= 1:
        raise EmbedkitError(f"must be in (0, 1], not {max_teacher_ratio}", field="--max-teacher-ratio")
    settings = RerankSettings(teacher, 1, batch_size, teacher_max_length, dtype or "float32", device).check("--")
    opt.ModelOptions(dtype=dtype, device=device).check()
    resolve_cross_encoder(teacher, "--teacher")
    check_output_file(output, overwrite, is_mined_file, "mined-negatives file")
    from embedkit.train.teacher import read_mined

    read_mined(mined)  # refused before the model loads
    from embedkit.reranking.reranker import CrossEncoderReranker
    from embedkit.train.teacher import rescore_mined

    written, dropped = rescore_mined(mined, output, CrossEncoderReranker(settings), max_teacher_ratio, overwrite)
    typer.echo(f"{written} written; the teacher dropped {dropped} negatives")


def register(app: typer.Typer) -> None:
    app.command()(rescore)
