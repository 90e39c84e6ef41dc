"""``embedkit encode``: a corpus to a resumable folder of embedding shards, in one process or split across workers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from embedkit.cli import options as opt

if TYPE_CHECKING:
    from embedkit.encode.folder import EmbeddingsFolder


def encode(
    output: Annotated[Path, typer.Option("--output", "-o", help="Embeddings folder (shards + manifest.json).")],
    dataset: Annotated[Optional[str], typer.Option("--dataset", "-d", help="BEIR dataset folder or name.")] = None,
    corpus: Annotated[Optional[Path], typer.Option(help="A corpus.jsonl[.gz] file instead of a dataset.")] = None,
    data_dir: opt.DataDir = None,
    shard_size: Annotated[int, typer.Option(help="Documents per shard (the unit of resume).")] = 10_000,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace embeddings made with other settings in --output.")
    ] = False,
    worker_id: Annotated[
        Optional[int],
        typer.Option(help="This worker's block of shard files, 0..num-workers-1 (e.g. $SLURM_ARRAY_TASK_ID)."),
    ] = None,
    num_workers: Annotated[
        Optional[int],
        typer.Option(
            help="Workers sharing the corpus; each writes its block and a part manifest into --output. "
            "With --executor ray: the encoding actors (default 1)."
        ),
    ] = None,
    executor: opt.Executor = "local",
    ray_address: opt.RayAddress = None,
    gpus_per_worker: opt.GpusPerWorker = 0.0,
    cpus_per_worker: opt.CpusPerWorker = None,
    shard_id: Annotated[Optional[int], typer.Option(hidden=True, help="Old name of --worker-id.")] = None,
    num_shards: Annotated[Optional[int], typer.Option(hidden=True, help="Old name of --num-workers.")] = None,
    merge: Annotated[
        bool, typer.Option("--merge", help="Only merge the workers' part manifests into manifest.json.")
    ] = False,
    model: opt.Model = None,
    pooling: opt.Pooling = None,
    query_prompt: opt.QueryPrompt = None,
    document_prompt: opt.DocumentPrompt = None,
    max_length: opt.MaxLength = None,
    max_active_dims: opt.MaxActiveDims = None,
    pool_factor: opt.PoolFactor = None,
    token_dtype: opt.TokenDtype = None,
    chunking: opt.ChunkingMethod = None,
    chunk_size: opt.ChunkSize = None,
    chunk_overlap: opt.ChunkOverlap = None,
    dtype: opt.Dtype = None,
    device: opt.Device = None,
    batch_tokens: opt.BatchTokens = None,
    backend: opt.Backend = None,
) -> None:
    """Encode a corpus into .npy shards plus a manifest; a rerun resumes, or encodes nothing if all is done.

    With --chunking each document becomes chunk rows '<id>#<n>' (their character spans beside them), which
    'embedkit index' and 'search' turn back into document scores (--aggregation).

    Split the work with --worker-id/--num-workers (one worker each, same --output; the last to finish merges), or run
    under torchrun, where each rank takes its block and rank 0 merges.

    Example: [bold]embedkit encode --dataset scifact --output emb/scifact[/bold]
    """
    from embedkit.encode.layout import check_embeddings_folder, check_worker
    from embedkit.errors import EmbedkitError

    worker_id = opt.renamed(worker_id, shard_id, "--worker-id", "--shard-id")
    num_workers = opt.renamed(num_workers, num_shards, "--num-workers", "--num-shards")
    if merge:
        if dataset is not None or corpus is not None or worker_id is not None:
            raise EmbedkitError(
                "--merge reads only --output (and --num-workers); drop --dataset, --corpus, --worker-id"
            )
        from embedkit.encode.workers import merge_encoded_parts

        _report(merge_encoded_parts(output, num_workers=num_workers), output)
        return
    if (dataset is None) == (corpus is None):
        raise EmbedkitError("give exactly one of --dataset or --corpus")
    ray = opt.ray_executor(executor, ray_address, num_workers, gpus_per_worker, cpus_per_worker)
    if ray is not None:
        if worker_id is not None:
            raise EmbedkitError("--executor ray schedules the shards itself; drop --worker-id", field="--worker-id")
        num_workers = None
    if (worker_id is None) != (num_workers is None):
        raise EmbedkitError("give --worker-id and --num-workers together")
    check_worker(worker_id or 0, num_workers or 1)
    opt.at_least(shard_size, 1, "--shard-size")
    options = opt.ModelOptions.of(locals()).check()
    check_embeddings_folder(output)
    from embedkit.outputs import refuse_inside_other_output

    refuse_inside_other_output(output, "embeddings")
    from embedkit.encode.distributed import torchrun_launch

    launch = torchrun_launch()
    if launch is not None and (worker_id is not None or num_workers is not None):
        raise EmbedkitError("under torchrun each rank takes --worker-id RANK --num-workers WORLD_SIZE; drop both")
    if launch is not None and ray is not None:
        raise EmbedkitError("--executor ray starts its own workers; run it as one process, not under torchrun")
    from embedkit.data.beir import load_corpus, load_dataset

    documents = load_corpus(corpus) if corpus else load_dataset(dataset, data_dir=data_dir).corpus
    if launch is not None:
        options.device = launch.device(options.device)
    embedder = options.load()
    try:
        if launch is not None:
            from embedkit.encode.distributed import encode_across_ranks

            result = encode_across_ranks(
                embedder, documents, output, launch, shard_size=shard_size, overwrite=overwrite
            )
        else:
            from embedkit.encode.writer import encode_to_folder

            result = encode_to_folder(
                embedder,
                documents,
                output,
                shard_size=shard_size,
                overwrite=overwrite,
                worker_id=worker_id or 0,
                num_workers=num_workers or 1,
                executor=ray,
            )
    except KeyboardInterrupt:
        raise _interrupted(output) from None
    _report(result, output)


def _interrupted(output: Path) -> Exception:
    """What Ctrl-C during an encode leaves: the complete shards (each written atomically) and how to go on."""
    from embedkit.errors import Interrupted
    from embedkit.storage import read_json

    kept = 0
    for manifest in sorted(output.glob("manifest*.json")):
        try:
            kept += len(read_json(manifest).get("shards", []))
        except Exception:  # a manifest we cannot read keeps nothing; the rerun re-encodes its shards
            continue
    return Interrupted(
        f"interrupted; {kept} complete shard{'s' if kept != 1 else ''} kept in {output}: rerun the same command "
        "to resume from them"
    )


def _report(result: EmbeddingsFolder, output: Path) -> None:
    """One line: the whole folder when it is complete, else this worker's part and who is still running."""
    from embedkit.encode.workers import pending_parts

    manifest = result.manifest
    worker = manifest.get("worker")
    rows = f"{manifest['count']} documents"
    if "documents" in manifest:
        rows = f"{manifest['count']} chunks of {manifest['documents']} documents"
    if worker is None:
        workers = manifest.get("workers", 1)
        by = f", merged from {workers} workers" if workers > 1 else ""
        typer.echo(
            f"{rows} in {manifest['num_shards']} shard files at {output} "
            f"({result.encoded_shards} shards encoded now{by})"
        )
        return
    start, stop = worker["shards"]
    block = f"shards {start}..{stop - 1}" if stop > start else "no shards"
    waiting = pending_parts(output, worker["num_workers"])
    typer.echo(
        f"worker {worker['worker_id']} of {worker['num_workers']}: {rows} in {block} "
        f"of {manifest['num_shards']} at {output} ({result.encoded_shards} shards encoded now); "
        + (f"waiting for workers {', '.join(map(str, waiting))}" if waiting else "all parts done, merge pending")
    )


def register(app: typer.Typer) -> None:
    app.command()(encode)
