"""Contrastive fine-tuning and unsupervised contrastive pretraining of bi-encoders."""

from typing import TYPE_CHECKING

from embedkit._lazy import lazy_exports

_EXPORTS = {
    "MergeSettings": "embedkit.train.merge_settings",
    "MiningSettings": "embedkit.train.mining",
    "TrainConfig": "embedkit.train.config",
    "merge_models": "embedkit.train.merged_model",
    "mine_hard_negatives": "embedkit.train.mining",
    "train": "embedkit.train.trainer",
    "training_data": "embedkit.train.trainer",
    "training_record": "embedkit.train.trainer",
    "write_mined": "embedkit.train.mining",
}
__all__ = [
    "MergeSettings",
    "MiningSettings",
    "TrainConfig",
    "merge_models",
    "mine_hard_negatives",
    "train",
    "training_data",
    "training_record",
    "write_mined",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from embedkit.train.config import TrainConfig
    from embedkit.train.merge_settings import MergeSettings
    from embedkit.train.merged_model import merge_models
    from embedkit.train.mining import MiningSettings, mine_hard_negatives, write_mined
    from embedkit.train.trainer import train, training_data, training_record
