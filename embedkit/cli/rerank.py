"""``embedkit rerank``: a TREC run in, its top hits re-scored by a cross-encoder (or a multi-vector model's MaxSim), a
TREC run out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embedkit.cli import options as opt

RERANK_FORMAT = "embedkit.reranking-run/1"


def _is_rerank_meta(path: Path) -> bool:
    from embedkit.errors import EmbedkitError
    from embedkit.storage import read_json

    try:
        return read_json(path).get("format") == RERANK_FORMAT
    except (EmbedkitError, AttributeError):
        return False


def rerank(
    run: Annotated[Path, typer.Option("--run", "-r", help="TREC run to rerank (e.g. from 'embedkit search').")],
    dataset: opt.Dataset,
    model: Annotated[
        str, typer.Option("--model", "-m", help="CrossEncoder folder or Hub name, or a MultiVectorEncoder folder.")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="TREC run to write (+ .meta.json with settings).")],
    depth: Annotated[int, typer.Option(help="Hits per query re-scored; the rest keep their order below them.")] = 100,
    batch_size: Annotated[int, typer.Option(help="Pairs per forward pass (sorted by length).")] = 32,
    max_length: Annotated[Optional[int], typer.Option(help="Tokens per (query, document) pair.")] = None,
    first_stage_weight: Annotated[
        float, typer.Option(help="w: score (1-w) min-max(logit) + w min-max(first stage); choose w on a dev set.")
    ] = 0.0,
    dtype: opt.Dtype = None,
    device: opt.Device = None,
    data_dir: opt.DataDir = None,
    overwrite: opt.Overwrite = False,
) -> None:
    """Rerank a run's top --depth hits with a cross-encoder; no query or hit of the input is dropped.

    Example: [bold]embedkit rerank -r runs/scifact.trec -d scifact -m models/reranker -o runs/scifact.ce.trec[/bold]
    """
    from embedkit.data.trec import looks_like_run
    from embedkit.outputs import check_output_file
    from embedkit.reranking.settings import RerankSettings, resolve_cross_encoder

    settings = RerankSettings(
        model, depth, batch_size, max_length, dtype or "float32", device, first_stage_weight
    ).check("--")
    opt.ModelOptions(dtype=dtype, device=device).check()
    resolve_cross_encoder(model, "--model", late_interaction=True)
    meta = output.with_name(output.name + ".meta.json")
    check_output_file(output, overwrite, looks_like_run, "TREC run")
    check_output_file(meta, overwrite, _is_rerank_meta, "rerank record", flag="--output")
    from embedkit.data.beir import load_dataset
    from embedkit.data.trec import read_run, write_run

    first_stage = read_run(run)  # checked before the model loads
    data = load_dataset(dataset, data_dir=data_dir)
    from embedkit.outputs import output_lock
    from embedkit.reranking.late_reranker import LateInteractionReranker, is_late_reranker
    from embedkit.reranking.reranker import CrossEncoderReranker, rerank_run
    from embedkit.storage import sha256_file, write_json

    if is_late_reranker(settings):  # MaxSim over the corpus's cached token vectors, where they are
        reranker = LateInteractionReranker(settings)
        reranked = reranker.rerank_run(first_stage, data)
    else:
        reranker = CrossEncoderReranker(settings)
        reranked = rerank_run(reranker, first_stage, data, source=run)
    record = {
        "format": RERANK_FORMAT,
        "reranker": reranker.describe(),
        "input_run": {"path": str(run.absolute()), "sha256": sha256_file(run)},
        "dataset": data.describe(),
        "queries": len(reranked),
        "pairs_scored": reranker.pairs_scored,
    }
    with output_lock(output):
        write_run(output, reranked, tag="embedkit-rerank")
        write_json(meta, record)
    typer.echo(f"{len(reranked)} queries reranked ({reranker.pairs_scored} pairs scored); run written to {output}")


def register(app: typer.Typer) -> None:
    app.command()(rerank)
