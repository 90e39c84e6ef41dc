"""The Hugging Face Trainer settings every embedkit training run shares (contrastive and pretraining alike)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch


def precision_flags(choice: str) -> dict[str, bool]:
    """``auto``: bf16 on GPUs that have it, else fp16 on GPUs, fp32 on CPUs."""
    if choice == "auto" and not torch.cuda.is_available():
        choice = "fp32"
    elif choice == "auto":
        choice = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return {"bf16": choice == "bf16", "fp16": choice == "fp16"}


def ddp_backend() -> str | None:
    """gloo under torchrun on CPUs (accelerate otherwise leaves CPU processes undistributed); the default elsewhere."""
    launched = int(os.environ.get("WORLD_SIZE", "1")) > 1
    return "gloo" if launched and not torch.cuda.is_available() else None


def shared_training_arguments(config: Any, checkpoints: Path) -> dict[str, Any]:
    """Keyword arguments for ``TrainingArguments`` from the fields TrainConfig and PretrainConfig share."""
    return {
        "output_dir": str(checkpoints),
        "num_train_epochs": config.epochs,
        "max_steps": config.max_steps,
        "per_device_train_batch_size": config.batch_size,
        "learning_rate": config.learning_rate,
        "lr_scheduler_type": config.scheduler,
        "warmup_steps": config.warmup_ratio,  # a float below 1 is a ratio of all steps (transformers v5)
        "weight_decay": config.weight_decay,
        "seed": config.seed,
        "data_seed": config.seed,
        "save_strategy": "steps",
        "save_steps": config.save_steps,
        "save_total_limit": config.save_total_limit,
        "logging_steps": config.logging_steps,
        "report_to": "none",
        "use_cpu": not torch.cuda.is_available(),
        "ddp_backend": ddp_backend(),
        **precision_flags(config.precision),
    }
