"""``embedkit mine``: hard negatives for a BEIR split, searched with a model's FAISS index."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from embedkit.cli import options as opt


def mine(
    dataset: opt.Dataset,
    output: Annotated[Path, typer.Option("--output", "-o", help="JSONL to write (+ .meta.json with settings).")],
    split: Annotated[str, typer.Option(help="qrels split whose queries are mined.")] = "train",
    range_min: Annotated[int, typer.Option(help="Highest rank (1-based) a negative may come from.")] = 10,
    range_max: Annotated[int, typer.Option(help="Lowest rank a negative may come from.")] = 100,
    num_negatives: Annotated[int, typer.Option(help="Negatives per (query, positive).")] = 8,
    margin: Annotated[float, typer.Option(help="Keep negatives scoring below positive - margin.")] = 0.0,
    relative_margin: Annotated[
        float, typer.Option(help="Keep negatives scoring below positive * (1 - relative margin).")
    ] = 0.05,
    sampling: Annotated[str, typer.Option(help="random | top, within the window.")] = "random",
    seed: Annotated[int, typer.Option(help="Seed of the random sampling.")] = 0,
    factory: Annotated[str, typer.Option(help="FAISS index_factory string searched.")] = "Flat",
    candidates: Annotated[
        str, typer.Option(help="dense | hybrid: rank by the model alone, or by RRF of it and BM25 (bm25s).")
    ] = "dense",
    teacher: Annotated[
        Optional[str],
        typer.Option(help="Cross-encoder that scores each positive and negative (the 'scores' distill reads)."),
    ] = None,
    max_teacher_ratio: Annotated[
        Optional[float],
        typer.Option(help="Drop a negative whose teacher probability exceeds this share of the positive's, e.g. 0.95."),
    ] = None,
    teacher_max_length: Annotated[Optional[int], typer.Option(help="Tokens per (query, document) pair.")] = None,
    data_dir: opt.DataDir = None,
    cache_dir: Annotated[Optional[Path], typer.Option(help="Where corpus embeddings are cached.")] = None,
    executor: opt.Executor = "local",
    ray_address: opt.RayAddress = None,
    num_workers: Annotated[Optional[int], typer.Option(help="With --executor ray: the encoding actors.")] = None,
    gpus_per_worker: opt.GpusPerWorker = 0.0,
    cpus_per_worker: opt.CpusPerWorker = None,
    model: opt.Model = None,
    max_length: opt.MaxLength = None,
    dtype: opt.Dtype = None,
    device: opt.Device = None,
    backend: opt.Backend = None,
    overwrite: opt.Overwrite = False,
) -> None:
    """Mine hard negatives from a rank window, skipping judged positives and near-positive scores.

    Example: [bold]embedkit mine --dataset scifact --split train --output mined/scifact.jsonl[/bold]
    """
    from embedkit.errors import EmbedkitError
    from embedkit.outputs import check_output_file, refuse_inside_other_output

    opt.at_least(range_min, 1, "--range-min")
    opt.at_least(num_negatives, 1, "--num-negatives")
    if range_max < range_min:
        raise EmbedkitError(f"the rank window {range_min}..{range_max} is empty", field="--range-max")
    if not 0 <= relative_margin < 1:
        raise EmbedkitError(f"must be in [0, 1), not {relative_margin}", field="--relative-margin")
    opt.one_of(sampling, ("random", "top"), "--sampling")
    from embedkit.index import check_factory

    check_factory(factory, field="--factory")  # before any data is read or encoded
    options = opt.ModelOptions(model=model, max_length=max_length, dtype=dtype, device=device, backend=backend).check()
    if executor == "local":
        opt.refuse_unused({"--num-workers": num_workers}, "without --executor ray")
    ray = opt.ray_executor(executor, ray_address, num_workers, gpus_per_worker, cpus_per_worker)

    from embedkit.train.mined import is_mined_file

    check_output_file(output, overwrite, is_mined_file, "mined-negatives file")
    refuse_inside_other_output(output, "mined-negatives file")
    from embedkit.data.beir import load_dataset
    from embedkit.train.mining import MiningSettings, mine_hard_negatives, write_mined

    opt.one_of(candidates, ("dense", "hybrid"), "--candidates")
    settings = MiningSettings(
        split=split,
        range_min=range_min,
        range_max=range_max,
        num_negatives=num_negatives,
        margin=margin,
        relative_margin=relative_margin,
        sampling=sampling,
        seed=seed,
        factory=factory,
        candidates=candidates,
        teacher=teacher,
        max_teacher_ratio=max_teacher_ratio,
        teacher_max_length=teacher_max_length,
    )
    settings.check()
    if teacher is not None:
        from embedkit.reranking.settings import resolve_cross_encoder

        resolve_cross_encoder(teacher, "--teacher")
    data = load_dataset(dataset, data_dir=data_dir)
    embedder = options.load()
    records = mine_hard_negatives(embedder, data, settings, cache_dir=cache_dir, executor=ray)
    described, dropped = None, 0
    if teacher is not None:
        from embedkit.reranking.reranker import CrossEncoderReranker
        from embedkit.reranking.settings import RerankSettings
        from embedkit.train.teacher import teacher_scored

        scorer = CrossEncoderReranker(RerankSettings(teacher, max_length=teacher_max_length, device=device))
        records, dropped = teacher_scored(records, scorer, max_teacher_ratio)
        described = scorer.describe()
    write_mined(output, records, embedder, data, settings, overwrite=overwrite, teacher=described)
    note = f"; the teacher dropped {dropped} negatives" if max_teacher_ratio is not None else ""
    full = sum(len(record["negatives"]) >= num_negatives for record in records)
    total = sum(len(record["negatives"]) for record in records)
    typer.echo(
        f"{len(records)} examples written to {output}: {full} with {num_negatives} negatives, "
        f"{len(records) - full} with fewer ({total} negatives in all){note}"
    )


def register(app: typer.Typer) -> None:
    app.command()(mine)
