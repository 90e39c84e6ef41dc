"""``embedkit train``: contrastive fine-tuning or unsupervised contrastive pretraining of a bi-encoder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def train(
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="YAML file of TrainConfig settings.")] = None,
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Model folder to write.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Model to start from.")] = None,
    pooling: Annotated[
        Optional[str], typer.Option(help="cls | mean | last | max, when --model is a plain transformers folder.")
    ] = None,
    objective: Annotated[Optional[str], typer.Option(help="supervised | simcse | cropping")] = None,
    dataset: Annotated[Optional[str], typer.Option("--dataset", "-d", help="BEIR folder or name.")] = None,
    train_split: Annotated[Optional[str], typer.Option(help="qrels split for supervised pairs.")] = None,
    data: Annotated[Optional[str], typer.Option(help="Training JSONL (e.g. from 'embedkit mine').")] = None,
    num_negatives: Annotated[Optional[int], typer.Option(help="Hard negatives per example.")] = None,
    drop_short_examples: Annotated[
        Optional[bool], typer.Option(help="Drop (and count) rows with too few negatives instead of failing.")
    ] = None,
    corpus_limit: Annotated[Optional[int], typer.Option(help="Unsupervised: first N documents.")] = None,
    loss: Annotated[Optional[str], typer.Option(help="infonce | distill")] = None,
    temperature: Annotated[Optional[float], typer.Option(help="Softmax temperature (scale = 1/T).")] = None,
    symmetric: Annotated[Optional[bool], typer.Option(help="Add the document-to-query term.")] = None,
    learn_temperature: Annotated[Optional[bool], typer.Option(help="Train the temperature.")] = None,
    mini_batch_size: Annotated[Optional[int], typer.Option(help="GradCache mini-batch size.")] = None,
    matryoshka_dims: Annotated[Optional[str], typer.Option(help="Comma-separated, e.g. 384,256,128,64.")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Examples per batch (per device).")] = None,
    epochs: Annotated[Optional[float], typer.Option(help="Epochs.")] = None,
    max_steps: Annotated[Optional[int], typer.Option(help="Steps (overrides epochs).")] = None,
    learning_rate: Annotated[Optional[float], typer.Option(help="Peak learning rate.")] = None,
    scheduler: Annotated[Optional[str], typer.Option(help="linear | cosine | constant ...")] = None,
    warmup_ratio: Annotated[Optional[float], typer.Option(help="Share of steps warming up.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Seed.")] = None,
    precision: Annotated[Optional[str], typer.Option(help="auto | fp32 | bf16 | fp16")] = None,
    max_length: Annotated[Optional[int], typer.Option(help="Tokens per text.")] = None,
    eval_dataset: Annotated[Optional[str], typer.Option(help="BEIR dataset evaluated after training.")] = None,
    eval_split: Annotated[Optional[str], typer.Option(help="Its split.")] = None,
    save_steps: Annotated[Optional[int], typer.Option(help="Checkpoint every N steps.")] = None,
    resume: Annotated[
        Optional[bool],
        typer.Option(
            help="Continue the unfinished run in OUTPUT.partial even if its settings differ (default: only if they "
            "are the same); --no-resume starts again."
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an earlier model (or unfinished run) in OUTPUT.")
    ] = False,
    data_dir: Annotated[Optional[str], typer.Option(help="Folder holding BEIR datasets by name.")] = None,
) -> None:
    """Fine-tune (or pretrain without labels) and save a sentence-transformers model folder with a model card.

    Runs on CPU or GPU; under [bold]torchrun --nproc_per_node=N[/bold] it trains with cross-device negatives.

    Example: [bold]embedkit train --dataset scifact --data mined/scifact.jsonl --num-negatives 1 -o models/ft[/bold]
    """
    from embedkit.errors import EmbedkitError
    from embedkit.settings_file import from_command_line
    from embedkit.storage import check_output_folder
    from embedkit.train.config import TrainConfig
    from embedkit.train.run_folder import MODEL_KIND

    options = dict(locals())
    if matryoshka_dims is not None:
        try:
            options["matryoshka_dims"] = [int(d) for d in matryoshka_dims.split(",")]
        except ValueError:
            raise EmbedkitError("expected comma-separated integers", field="matryoshka_dims") from None
    settings = from_command_line(TrainConfig, config, options)
    settings.check()
    check_output_folder(settings.output, MODEL_KIND, overwrite=True)  # never a folder embedkit did not write
    from embedkit.train.trainer import train as run_training

    folder = run_training(settings)
    typer.echo(f"model written to {folder}")


def register(app: typer.Typer) -> None:
    app.command()(train)
