"""``embedkit pretrain``: masked-autoencoder pretraining (RetroMAE, DupMAE) or plain MLM from a raw corpus."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def pretrain(
    config: Annotated[
        Optional[Path], typer.Option("--config", "-c", help="YAML file of PretrainConfig settings.")
    ] = None,
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Encoder folder to write.")] = None,
    objective: Annotated[Optional[str], typer.Option(help="retromae | dupmae | mlm")] = None,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="BERT-like checkpoint to start from.")] = None,
    model_config: Annotated[
        Optional[str], typer.Option(help="Folder with config + tokenizer: start from random weights.")
    ] = None,
    dataset: Annotated[Optional[str], typer.Option("--dataset", "-d", help="BEIR folder or name (its corpus).")] = None,
    data: Annotated[Optional[str], typer.Option(help="JSONL, .txt (one text a line) or datasets folder.")] = None,
    corpus_limit: Annotated[Optional[int], typer.Option(help="Use the first N texts.")] = None,
    max_length: Annotated[Optional[int], typer.Option(help="Tokens per text.")] = None,
    masking: Annotated[Optional[str], typer.Option(help="random | whole_word | span | idf")] = None,
    encoder_mask_ratio: Annotated[Optional[float], typer.Option(help="Encoder mask ratio (RetroMAE 0.15-0.3).")] = None,
    decoder_mask_ratio: Annotated[Optional[float], typer.Option(help="Decoder mask ratio (RetroMAE 0.5-0.7).")] = None,
    decoder: Annotated[Optional[str], typer.Option(help="enhanced | plain")] = None,
    bow_weight: Annotated[Optional[float], typer.Option(help="DupMAE bag-of-words loss weight.")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Texts per batch (per device).")] = None,
    epochs: Annotated[Optional[float], typer.Option(help="Epochs.")] = None,
    max_steps: Annotated[Optional[int], typer.Option(help="Steps (overrides epochs).")] = None,
    learning_rate: Annotated[Optional[float], typer.Option(help="Peak learning rate.")] = None,
    scheduler: Annotated[Optional[str], typer.Option(help="linear | cosine | constant ...")] = None,
    warmup_ratio: Annotated[Optional[float], typer.Option(help="Share of steps warming up.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Seed.")] = None,
    precision: Annotated[Optional[str], typer.Option(help="auto | fp32 | bf16 | fp16")] = None,
    save_steps: Annotated[Optional[int], typer.Option(help="Checkpoint every N steps.")] = None,
    logging_steps: Annotated[Optional[int], typer.Option(help="Log loss every N steps.")] = None,
    resume: Annotated[
        Optional[bool],
        typer.Option(
            help="Continue the unfinished run in OUTPUT.partial even if its settings differ (default: only if they "
            "are the same); --no-resume starts again."
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an earlier encoder (or unfinished run) in OUTPUT.")
    ] = False,
    data_dir: Annotated[Optional[str], typer.Option(help="Folder holding BEIR datasets by name.")] = None,
) -> None:
    """Pretrain a BERT-like encoder for retrieval and save a folder that [bold]embedkit train --model[/bold] fine-tunes.

    Runs on CPU or GPU; under [bold]torchrun --nproc_per_node=N[/bold] it trains data-parallel.

    Example: [bold]embedkit pretrain --objective retromae --dataset scifact --max-steps 1000 -o models/retromae[/bold]
    """
    from embedkit.pretrain.config import PretrainConfig
    from embedkit.settings_file import from_command_line
    from embedkit.storage import check_output_folder
    from embedkit.train.run_folder import ENCODER_KIND

    settings = from_command_line(PretrainConfig, config, dict(locals()))
    settings.check()
    check_output_folder(settings.output, ENCODER_KIND, overwrite=True)  # never a folder embedkit did not write
    from embedkit.pretrain.trainer import pretrain as run_pretraining

    folder = run_pretraining(settings)
    typer.echo(f"encoder written to {folder}")


def register(app: typer.Typer) -> None:
    app.command()(pretrain)
