"""The options ``train`` and ``pretrain`` share, declared once: the fields of ``embedkit.training.config.RunConfig``.

Each is ``None`` unless given, so a ``--config`` YAML fills what the command line leaves out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

Config = Annotated[Optional[Path], typer.Option("--config", "-c", help="YAML file of these settings (by field name).")]
Output = Annotated[Optional[str], typer.Option("--output", "-o", help="Folder to write (checkpoints: OUTPUT.partial).")]
Dataset = Annotated[Optional[str], typer.Option("--dataset", "-d", help="BEIR folder or name.")]
CorpusLimit = Annotated[Optional[int], typer.Option(help="Use the first N documents or texts.")]
MaxLength = Annotated[Optional[int], typer.Option(help="Tokens per text.")]
BatchSize = Annotated[Optional[int], typer.Option(help="Examples per batch (per device).")]
Epochs = Annotated[Optional[float], typer.Option(help="Epochs.")]
MaxSteps = Annotated[Optional[int], typer.Option(help="Steps (overrides epochs).")]
LearningRate = Annotated[Optional[float], typer.Option(help="Peak learning rate.")]
Scheduler = Annotated[Optional[str], typer.Option(help="linear | cosine | constant ...")]
WarmupRatio = Annotated[Optional[float], typer.Option(help="Share of steps warming up.")]
Seed = Annotated[Optional[int], typer.Option(help="Seed.")]
Precision = Annotated[Optional[str], typer.Option(help="auto | fp32 | bf16 | fp16")]
SaveSteps = Annotated[Optional[int], typer.Option(help="Checkpoint every N steps.")]
LoggingSteps = Annotated[Optional[int], typer.Option(help="Log the loss every N steps.")]
DevDataset = Annotated[
    Optional[str], typer.Option(help="BEIR folder or name evaluated during training (nDCG@10 and more).")
]
DevSplit = Annotated[Optional[str], typer.Option(help="Its qrels split. [default: dev]")]
EvalSteps = Annotated[
    Optional[int], typer.Option(help="Evaluate on the dev and transfer sets every N steps (default: save steps).")
]
TransferDataset = Annotated[
    Optional[list[str]],
    typer.Option(
        "--transfer-dataset",
        help="BEIR folder or name never trained on, scored before, during and after training (repeatable).",
    ),
]
TransferSplit = Annotated[Optional[str], typer.Option(help="The transfer collections' qrels split. [default: test]")]
Resume = Annotated[
    Optional[bool],
    typer.Option(
        help="Continue the unfinished run in OUTPUT.partial even if its settings differ (default: only if they are "
        "the same); --no-resume starts again."
    ),
]
Overwrite = Annotated[
    Optional[bool], typer.Option("--overwrite", help="Replace an earlier output (or unfinished run) in OUTPUT.")
]
DataDir = Annotated[Optional[str], typer.Option(help="Folder holding BEIR datasets by name.")]
