"""Masked-autoencoder pretraining for retrieval: RetroMAE, DupMAE and plain MLM, with shared masking policies."""

from embedkit.pretrain.config import OBJECTIVES, PretrainConfig
from embedkit.pretrain.trainer import RECORD, pretrain

__all__ = ["OBJECTIVES", "RECORD", "PretrainConfig", "pretrain", "pretraining_record"]


def pretraining_record(folder: str) -> dict:
    """The JSON record ``pretrain`` writes beside the encoder."""
    import json
    from pathlib import Path

    return json.loads((Path(folder) / RECORD).read_text())
