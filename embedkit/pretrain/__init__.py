"""Masked-autoencoder pretraining for retrieval: RetroMAE, DupMAE and plain MLM, with shared masking policies."""

from typing import TYPE_CHECKING

from embedkit._lazy import lazy_exports

_EXPORTS = {
    "OBJECTIVES": "embedkit.pretrain.config",
    "PretrainConfig": "embedkit.pretrain.config",
    "RECORD": "embedkit.pretrain.trainer",
    "pretrain": "embedkit.pretrain.trainer",
    "pretraining_record": "embedkit.pretrain.trainer",
}
__all__ = [
    "OBJECTIVES",
    "RECORD",
    "PretrainConfig",
    "pretrain",
    "pretraining_record",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from embedkit.pretrain.config import OBJECTIVES, PretrainConfig
    from embedkit.pretrain.trainer import RECORD, pretrain, pretraining_record
