"""``embedkit pretrain``: masked-autoencoder pretraining (RetroMAE, DupMAE) or plain MLM from a raw corpus."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Optional

import typer

from embedkit.cli import run_options as run


def pretrain(
    config: run.Config = None,
    output: run.Output = None,
    objective: Annotated[Optional[str], typer.Option(help="retromae | dupmae | mlm | tsdae")] = None,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="BERT-like checkpoint to start from.")] = None,
    model_config: Annotated[
        Optional[str], typer.Option(help="Folder with config + tokenizer: start from random weights.")
    ] = None,
    dataset: run.Dataset = None,
    data: Annotated[Optional[str], typer.Option(help="JSONL, .txt (one text a line) or datasets folder.")] = None,
    corpus_limit: run.CorpusLimit = None,
    max_length: run.MaxLength = None,
    chunk_overlap: Annotated[
        Optional[int], typer.Option(help="Tokens shared by the windows a long text is cut into (default max-length/4).")
    ] = None,
    truncate: Annotated[
        Optional[bool], typer.Option("--truncate", help="Cut long texts after --max-length tokens instead.")
    ] = None,
    sentence_pooling: Annotated[
        Optional[str], typer.Option(help="cls | mean: the vector the decoder sees (default: the model's own).")
    ] = None,
    normalize: Annotated[
        Optional[bool],
        typer.Option("--normalize/--no-normalize", help="Normalise the output's vectors (default: as the model does)."),
    ] = None,
    head_warmup_steps: Annotated[
        Optional[int], typer.Option(help="First steps train only the head/decoder (default 25; 0 from scratch).")
    ] = None,
    head_learning_rate: Annotated[
        Optional[float], typer.Option(help="Learning rate of the head and decoder (default 1e-4).")
    ] = None,
    masking: Annotated[Optional[str], typer.Option(help="random | whole_word | span | idf")] = None,
    encoder_mask_ratio: Annotated[Optional[float], typer.Option(help="Encoder mask ratio (RetroMAE 0.15-0.3).")] = None,
    decoder_mask_ratio: Annotated[Optional[float], typer.Option(help="Decoder mask ratio (RetroMAE 0.5-0.7).")] = None,
    decoder: Annotated[Optional[str], typer.Option(help="enhanced | plain")] = None,
    bow_weight: Annotated[Optional[float], typer.Option(help="DupMAE bag-of-words loss weight (default 0.1).")] = None,
    deletion_ratio: Annotated[
        Optional[float], typer.Option(help="TSDAE: share of words deleted (default 0.6).")
    ] = None,
    batch_size: run.BatchSize = None,
    epochs: run.Epochs = None,
    max_steps: run.MaxSteps = None,
    learning_rate: run.LearningRate = None,
    scheduler: run.Scheduler = None,
    warmup_ratio: run.WarmupRatio = None,
    seed: run.Seed = None,
    precision: run.Precision = None,
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
    """Pretrain a BERT-like encoder for retrieval and save a folder that [bold]embedkit train --model[/bold] fine-tunes.

    From a checkpoint the head and decoder first train alone (the encoder frozen), then everything at lr 2e-5.

    Runs on CPU or GPU; under [bold]torchrun --nproc_per_node=N[/bold] it trains data-parallel.

    Example: [bold]embedkit pretrain --objective retromae --dataset scifact --max-steps 1000 -o models/retromae[/bold]
    """
    from embedkit.pretrain.config import PretrainConfig
    from embedkit.settings_file import from_command_line
    from embedkit.training.run_folder import ENCODER_KIND, check_run, prepare_run, run_lock

    settings = from_command_line(PretrainConfig, config, dict(locals()))
    settings.check()
    # Refused here, before torch loads: a folder embedkit did not write, another run's output or unfinished run.
    run_settings = asdict(settings)
    if check_run(settings.output, ENCODER_KIND, run_settings, resume=settings.resume, overwrite=settings.overwrite):
        with run_lock(settings.output, main=True):  # done: only tidy what a kill after the commit left
            prepare_run(
                settings.output, ENCODER_KIND, run_settings, resume=settings.resume, overwrite=settings.overwrite
            )
        typer.echo(f"{settings.output} already holds the encoder these settings make: nothing to train")
        return
    from embedkit.pretrain.trainer import pretrain as run_pretraining

    folder = run_pretraining(settings)
    typer.echo(f"encoder written to {folder}")


def register(app: typer.Typer) -> None:
    app.command()(pretrain)
