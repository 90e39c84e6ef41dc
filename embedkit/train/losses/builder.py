"""``build_loss``: the loss a training config names, composed from the modules beside this one."""

from __future__ import annotations

from collections.abc import Sequence

from sentence_transformers import SentenceTransformer
from torch import nn

from embedkit.errors import EmbedkitError
from embedkit.train.losses.cross_device import is_distributed
from embedkit.train.losses.distillation import listwise_distillation
from embedkit.train.losses.gradcache import gradcache_infonce
from embedkit.train.losses.infonce import infonce
from embedkit.train.losses.matryoshka import matryoshka

LOSSES = ("infonce", "distill")


def build_loss(
    model: SentenceTransformer,
    name: str = "infonce",
    *,
    temperature: float = 0.05,
    teacher_temperature: float | None = None,
    symmetric: bool = False,
    learn_temperature: bool = False,
    mini_batch_size: int | None = None,
    matryoshka_dims: Sequence[int] | None = None,
    gather_across_devices: bool | None = None,
) -> nn.Module:
    """InfoNCE (plain, GradCache when ``mini_batch_size`` is set, cross-device under torchrun) or listwise
    distillation (the teacher's scores softmaxed at ``teacher_temperature``, default the student's), optionally
    wrapped in Matryoshka."""
    gather = is_distributed() if gather_across_devices is None else gather_across_devices
    if name == "infonce":
        if mini_batch_size:
            if learn_temperature:
                raise EmbedkitError("a learned temperature is not available with GradCache", field="learn_temperature")
            loss = gradcache_infonce(model, mini_batch_size, temperature, symmetric, gather_across_devices=gather)
        else:
            loss = infonce(model, temperature, symmetric, learn_temperature, gather_across_devices=gather)
    elif name == "distill":
        loss = listwise_distillation(model, temperature=temperature, teacher_temperature=teacher_temperature)
    else:
        raise EmbedkitError(f"unknown loss '{name}' (choose from {', '.join(LOSSES)})", field="loss")
    if matryoshka_dims:
        loss = matryoshka(model, loss, matryoshka_dims)
    return loss
