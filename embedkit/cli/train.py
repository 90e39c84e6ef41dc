"""``embedkit train``: contrastive fine-tuning or unsupervised contrastive pretraining of a bi-encoder."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Optional

import typer

from embedkit.cli import run_options as run


def train(
    config: run.Config = None,
    output: run.Output = None,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Model to start from.")] = None,
    pooling: Annotated[
        Optional[str], typer.Option(help="cls | mean | last | max, when --model is a plain transformers folder.")
    ] = None,
    objective: Annotated[
        Optional[str],
        typer.Option(
            help="supervised | simcse | cropping (bi-encoders) | cross-encoder (a reranker) | splade | "
            "splade-inference-free | csr (learned sparse) | colbert (late interaction)."
        ),
    ] = None,
    dataset: run.Dataset = None,
    train_split: Annotated[Optional[str], typer.Option(help="qrels split for supervised pairs.")] = None,
    data: Annotated[Optional[str], typer.Option(help="Training JSONL (e.g. from 'embedkit mine').")] = None,
    num_negatives: Annotated[Optional[int], typer.Option(help="Hard negatives per example.")] = None,
    drop_short_examples: Annotated[
        Optional[bool], typer.Option(help="Drop (and count) rows with too few negatives instead of failing.")
    ] = None,
    corpus_limit: run.CorpusLimit = None,
    loss: Annotated[
        Optional[str], typer.Option(help="infonce | distill; for a cross-encoder bce | listnet | lambdaloss.")
    ] = None,
    temperature: Annotated[Optional[float], typer.Option(help="Softmax temperature (scale = 1/T).")] = None,
    teacher_temperature: Annotated[
        Optional[float], typer.Option(help="Softmax temperature of the teacher's scores (distill). [default: 1.0]")
    ] = None,
    dev_fraction: Annotated[
        Optional[float],
        typer.Option(help="Carve this share of the training queries out as a dev set (seeded); keep the best step."),
    ] = None,
    dev_dtype: Annotated[
        Optional[str], typer.Option(help="float32 | bfloat16: autocast of the dev evaluation. [default: float32]")
    ] = None,
    symmetric: Annotated[Optional[bool], typer.Option(help="Add the document-to-query term.")] = None,
    learn_temperature: Annotated[Optional[bool], typer.Option(help="Train the temperature.")] = None,
    mini_batch_size: Annotated[Optional[int], typer.Option(help="GradCache mini-batch size.")] = None,
    matryoshka_dims: Annotated[Optional[str], typer.Option(help="Comma-separated, e.g. 384,256,128,64.")] = None,
    flops_query_weight: Annotated[
        Optional[float], typer.Option(help="SPLADE: FLOPS regularisation of queries. [default: 5e-5]")
    ] = None,
    flops_document_weight: Annotated[
        Optional[float], typer.Option(help="SPLADE: FLOPS regularisation of documents. [default: 3e-5]")
    ] = None,
    query_learning_rate: Annotated[
        Optional[float], typer.Option(help="Inference-free SPLADE: the query table's learning rate. [default: 1e-3]")
    ] = None,
    csr_k: Annotated[Optional[int], typer.Option(help="CSR: latents kept per vector. [default: 96]")] = None,
    freeze_encoder: Annotated[
        Optional[bool], typer.Option(help="CSR: train the sparse auto-encoder only, the dense model frozen.")
    ] = None,
    new_mlm_head: Annotated[
        Optional[bool],
        typer.Option(help="SPLADE: start from a model without an MLM head by drawing a random one (not advised)."),
    ] = None,
    scoring: Annotated[
        Optional[str], typer.Option(help="colbert: how it scores while training, colbert | xtr. [default: colbert]")
    ] = None,
    projection_dim: Annotated[
        Optional[int], typer.Option(help="colbert: the token vectors' width. [default: 128]")
    ] = None,
    batch_size: run.BatchSize = None,
    epochs: run.Epochs = None,
    max_steps: run.MaxSteps = None,
    learning_rate: run.LearningRate = None,
    scheduler: run.Scheduler = None,
    warmup_ratio: run.WarmupRatio = None,
    seed: run.Seed = None,
    precision: run.Precision = None,
    max_length: run.MaxLength = None,
    soup_last: Annotated[
        Optional[int], typer.Option(help="Save the uniform average of the last N checkpoints (a soup).")
    ] = None,
    keep_checkpoints: Annotated[
        Optional[bool], typer.Option(help="Keep every checkpoint's weights in OUTPUT/checkpoints (for embedkit merge).")
    ] = None,
    merge_with_base: Annotated[
        Optional[str],
        typer.Option(
            help="Interpolate the weights with the starting model: (1-a)*base + a*tuned for a in [0, 1], or auto "
            "(the smallest a whose dev nDCG@10 is within 0.005 of the best on 0, 0.1, ..., 1)."
        ),
    ] = None,
    eval_dataset: Annotated[Optional[str], typer.Option(help="BEIR dataset evaluated after training.")] = None,
    eval_split: Annotated[Optional[str], typer.Option(help="Its split.")] = None,
    dev_dataset: run.DevDataset = None,
    dev_split: run.DevSplit = None,
    eval_steps: run.EvalSteps = None,
    transfer_datasets: run.TransferDataset = None,
    transfer_split: run.TransferSplit = None,
    save_steps: run.SaveSteps = None,
    logging_steps: run.LoggingSteps = None,
    resume: run.Resume = None,
    overwrite: run.Overwrite = None,
    data_dir: run.DataDir = None,
) -> None:
    """Fine-tune (or pretrain without labels) and save a sentence-transformers model folder with a model card.

    Runs on CPU or GPU; under [bold]torchrun --nproc_per_node=N[/bold] it trains with cross-device negatives.

    Example: [bold]embedkit train --dataset scifact --data mined/scifact.jsonl --num-negatives 1 -o models/ft[/bold]
    """
    from embedkit.errors import EmbedkitError
    from embedkit.settings_file import from_command_line
    from embedkit.train.config import TrainConfig
    from embedkit.training.run_folder import MODEL_KIND, check_run, prepare_run, run_lock

    options = dict(locals())
    if matryoshka_dims is not None:
        try:
            options["matryoshka_dims"] = [int(d) for d in matryoshka_dims.split(",")]
        except ValueError:
            raise EmbedkitError("expected comma-separated integers", field="matryoshka_dims") from None
    settings = from_command_line(TrainConfig, config, options)
    settings.check()
    # Refused here, before torch loads: a folder embedkit did not write, another run's output or unfinished run.
    run_settings = asdict(settings)
    if check_run(settings.output, MODEL_KIND, run_settings, resume=settings.resume, overwrite=settings.overwrite):
        with run_lock(settings.output, main=True):  # done: only tidy what a kill after the commit left
            prepare_run(settings.output, MODEL_KIND, run_settings, resume=settings.resume, overwrite=settings.overwrite)
        typer.echo(f"{settings.output} already holds the model these settings make: nothing to train")
        return
    from embedkit.train.trainer import train as run_training

    folder = run_training(settings)
    typer.echo(f"model written to {folder}")


def register(app: typer.Typer) -> None:
    app.command()(train)
