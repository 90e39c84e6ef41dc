"""Contrastive fine-tuning and unsupervised contrastive pretraining of bi-encoders."""

from embedkit.train.config import TrainConfig
from embedkit.train.mining import MiningSettings, mine_hard_negatives, write_mined
from embedkit.train.trainer import train, training_data, training_record

__all__ = [
    "MiningSettings",
    "TrainConfig",
    "mine_hard_negatives",
    "train",
    "training_data",
    "training_record",
    "write_mined",
]
