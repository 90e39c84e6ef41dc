"""``embedkit rescore``: a mined-negatives file scored by a cross-encoder teacher (and, with a ratio, filtered)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embedkit.cli import options as opt


def rescore(
    mined: Annotated[Path, typer.Option("--mined", help="A file written by 'embedkit mine'.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Mined file to write (+ .meta.json).")],
    teacher: Annotated[
        Optional[str], typer.Option(help="sentence-transformers CrossEncoder folder or Hub name.")
    ] = None,
    teacher_run: Annotated[
        Optional[Path],
        typer.Option(help="A TREC run whose scores teach instead (e.g. a fusion's run.trec); needs --dataset."),
    ] = None,
    dataset: Annotated[Optional[str], typer.Option("--dataset", "-d", help="The run's BEIR dataset.")] = None,
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
    """Write the teacher's logits as 'scores' (what 'train --loss distill' reads), dropping likely false negatives;
    or, with --teacher-run, a run's scores for the same documents (one listed below the run's last scores as its last).

    Example: [bold]embedkit rescore --mined mined.jsonl --teacher reranker --max-teacher-ratio 0.95 -o out.jsonl[/bold]
    """
    from embedkit.errors import EmbedkitError
    from embedkit.outputs import check_output_file
    from embedkit.reranking.settings import RerankSettings, resolve_cross_encoder
    from embedkit.train.mined import is_mined_file

    if (teacher is None) == (teacher_run is None):
        raise EmbedkitError("give one teacher: a cross-encoder or a run", field="--teacher")
    if teacher_run is not None:
        if teacher_max_length is not None:
            raise EmbedkitError("a cross-encoder's setting; a run has no tokens", field="--teacher-max-length")
        return _rescore_from_run(mined, teacher_run, dataset, output, max_teacher_ratio, overwrite)
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


def _rescore_from_run(
    mined: Path, run: Path, dataset: str | None, output: Path, max_teacher_ratio: float | None, overwrite: bool
) -> None:
    from embedkit.data import load_dataset
    from embedkit.errors import EmbedkitError
    from embedkit.outputs import check_output_file
    from embedkit.train.mined import is_mined_file
    from embedkit.train.teacher import read_mined, rescore_mined_from_run

    if dataset is None:
        message = "a run's document ids are checked against its dataset: give --dataset"
        raise EmbedkitError(message, field="--teacher-run")
    if max_teacher_ratio is not None:
        raise EmbedkitError("filters by a cross-encoder's probabilities; a run has none", field="--max-teacher-ratio")
    check_output_file(output, overwrite, is_mined_file, "mined-negatives file")
    read_mined(mined)
    corpus_ids = set(load_dataset(dataset).corpus["_id"])
    _, floored = rescore_mined_from_run(mined, output, run, corpus_ids, overwrite)
    typer.echo(f"{output} written; {floored} scores were below the run's list and took its last score")


def register(app: typer.Typer) -> None:
    app.command()(rescore)
