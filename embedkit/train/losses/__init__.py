"""Contrastive losses, one per module. Each is sentence-transformers' own loss where that library has it;
embedkit adds only what it lacks (a learned temperature) and one ``build_loss`` that composes them."""

from embedkit.train.losses.builder import LOSSES, build_loss
from embedkit.train.losses.distillation import listwise_distillation
from embedkit.train.losses.gradcache import gradcache_infonce
from embedkit.train.losses.infonce import LearnedTemperatureInfoNCE, infonce
from embedkit.train.losses.matryoshka import matryoshka

__all__ = [
    "LOSSES",
    "LearnedTemperatureInfoNCE",
    "build_loss",
    "gradcache_infonce",
    "infonce",
    "listwise_distillation",
    "matryoshka",
]
