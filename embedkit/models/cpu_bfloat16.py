"""bfloat16 inference on a CPU: what ``load_model(dtype="bfloat16", backend="torch")`` runs there (with no backend
named, OpenVINO runs where it has bf16 kernels: ``models/openvino_backend.py``).

The arithmetic is autocast's: each linear and attention product takes bf16 operands, multiplies them exactly and
sums in fp32, and rounds its output to bf16; layer norms and the residual stream stay float32 (cosine to
sentence-transformers under autocast >= 0.99997 on SciFact). Which kernels run it depends on the CPU (``products``):

- ``onednn-bf16``, on a CPU with bf16 instructions (AVX-512 BF16, AMX). Under plain autocast a MiniLM forward there
  spent a third of its time in ``scaled_dot_product_attention`` and re-read every weight per batch. Here every
  ``nn.Linear`` keeps its weight once in oneDNN's blocked bf16 layout and runs through
  ``torch.ops.mkldnn._linear_pointwise`` (the kernel torch's inductor uses on the CPU), an exact GELU fused after a
  feed-forward's first linear, query, key and value as one product.
- ``fp32``, on a CPU without them (AVX2 only). torch's bf16 matrix product falls back there to a generic kernel,
  about 9x slower than its fp32 one, so sentence-transformers under bf16 autocast is several times slower than in
  fp32. Here the same bf16 operands (weights rounded once, inputs rounded per batch) go through the fp32 kernels,
  which also multiply bf16 values exactly and sum in fp32, and each output is rounded to bf16: autocast's
  numbers at 0.79-0.93x of fp32's speed, the roundings being the difference (``benchmarks/RESULTS.md``, "bfloat16
  on a CPU without bf16 instructions").

Encoder attention (not causal, one key per query head) runs a block of sequences at a time so the score block stays
in the cache, its softmax accumulated in fp32; where the mask only hides right padding, a block's keys stop at its
longest sequence and only blocks that still have padding are masked. With gradients enabled or in training mode both
fall back to the untouched arithmetic (``nn.Linear``'s own ``forward``, transformers' SDPA), so training, saving and
``state_dict`` see the ordinary model. ``benchmarks/encode.py`` measures the speed; ``tests/test_cpu_bfloat16.py``
the agreement and the fallbacks.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from typing import Any

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.activations import GELUActivation
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ONEDNN, FP32 = "onednn-bf16", "fp32"  # the kernels that run the bf16 products
ATTENTION = {ONEDNN: "embedkit_cpu_bfloat16", FP32: "embedkit_cpu_bfloat16_fp32"}
SCORES_PER_BLOCK = 1 << 20  # attention scores computed at once: 2 MB of bf16, cache-sized


def supported(device: str, dtype: str) -> bool:
    """True where this path applies: bfloat16 on the CPU."""
    return dtype == "bfloat16" and torch.device(device).type == "cpu"


def bf16_instructions() -> bool:
    """True where torch's oneDNN has bf16 kernels on this CPU, so the products run in bf16 (else in fp32)."""
    return torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def _fp32_kernels(products: str) -> contextlib.AbstractContextManager[Any]:
    """Autocast off where the products run in fp32: it would send the fp32 operands to torch's bf16 kernels."""
    return torch.autocast("cpu", enabled=False) if products == FP32 else contextlib.nullcontext()


def _inference(module: nn.Module, x: torch.Tensor) -> bool:
    return x.device.type == "cpu" and not module.training and not torch.is_grad_enabled()


def _matmul(
    rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, gelu: bool, products: str
) -> torch.Tensor:
    """``rows @ weight.T + bias`` (then GELU) on bf16 operands, rounded to bf16."""
    if products == ONEDNN:
        post, algorithm = ("gelu", "none") if gelu else ("none", "")
        return torch.ops.mkldnn._linear_pointwise(rows.to(torch.bfloat16), weight, bias, post, [], algorithm)
    with torch.autocast("cpu", enabled=False):  # it would send the fp32 operands back to the bf16 kernels
        y = nn.functional.linear(rows.to(torch.bfloat16).float(), weight, bias)
        return (nn.functional.gelu(y) if gelu else y).to(torch.bfloat16)


class _Pack:
    """The weights of one or more linears, stacked by rows and rounded to bf16: in oneDNN's bf16 layout, or as
    float32 for the fp32 kernels. Repacked when any changes (an optimizer step), so inference after training
    multiplies by the trained weights."""

    def __init__(self, products: str) -> None:
        self.products = products
        self.key: tuple[Any, ...] | None = None
        self.weight: torch.Tensor | None = None
        self.bias: torch.Tensor | None = None

    def of(self, linears: list[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
        key = tuple((m.weight._version, m.weight.data_ptr()) for m in linears)
        if key != self.key:
            weight = torch.cat([m.weight.detach() for m in linears]).to(torch.bfloat16)
            biases = [m.bias.detach() if m.bias is not None else m.weight.new_zeros(m.out_features) for m in linears]
            bias = None if all(m.bias is None for m in linears) else torch.cat(biases).to(torch.bfloat16)
            if self.products == ONEDNN:
                weight = torch.ops.mkldnn._reorder_linear_weight(weight)
            else:  # bf16 values held as float32: the fp32 kernels multiply them exactly
                weight, bias = weight.float(), None if bias is None else bias.float()
            self.key, self.weight, self.bias = key, weight, bias
        return self.weight, self.bias

    def __getstate__(self) -> dict[str, Any]:  # the opaque oneDNN tensor neither pickles nor deep-copies
        return {"products": self.products, "key": None, "weight": None, "bias": None}


class _Projections:
    """Sibling projections of one hidden state (an attention block's query, key and value): the first call
    multiplies by all their weights at once and casts the input once; the others take their slice. The pending
    slices are per thread: encode streams (``models/cpu_streams.py``) run the same layer on other batches at once."""

    def __init__(self, members: list[PackedLinear]) -> None:
        self.members = members
        self.pack = _Pack(members[0].products)
        self.local = threading.local()

    def output(self, member: PackedLinear, x: torch.Tensor) -> torch.Tensor:
        slot = next(i for i, m in enumerate(self.members) if m is member)
        source = getattr(self.local, "source", None)  # the hidden state the pending slices were computed from
        pending: dict[int, torch.Tensor] = getattr(self.local, "pending", {})
        if source is None or source() is not x or slot not in pending:
            weight, bias = self.pack.of(self.members)  # type: ignore[arg-type]
            y = _matmul(x.reshape(-1, member.in_features), weight, bias, False, member.products)
            pending = dict(enumerate(y.split([m.out_features for m in self.members], dim=1)))
            self.local.source, self.local.pending = weakref.ref(x), pending
        y = pending.pop(slot)
        if not pending:
            self.local.source = None
        return y.reshape(*x.shape[:-1], member.out_features)

    def __getstate__(self) -> dict[str, Any]:
        return {"members": self.members, "pack": _Pack(self.members[0].products)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, local=threading.local())


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` (same parameters, same ``state_dict``) that, in CPU inference, multiplies bf16 operands with
    its weight packed once for ``products``' kernels, optionally with an exact GELU fused after it or as one of a
    group of projections of the same input."""

    def __init__(self, linear: nn.Linear, gelu: bool = False, products: str = ONEDNN) -> None:
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self.training = linear.training
        self.gelu, self.products = gelu, products
        self.pack = _Pack(products)
        self.group: _Projections | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _inference(self, x):
            y = super().forward(x)
            return nn.functional.gelu(y) if self.gelu else y
        if self.group is not None:
            return self.group.output(self, x)
        weight, bias = self.pack.of([self])
        y = _matmul(x.reshape(-1, self.in_features), weight, bias, self.gelu, self.products)
        return y.reshape(*x.shape[:-1], self.out_features)


def _softmax(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension, accumulated in fp32 and rounded once to the scores' dtype.

    torch's bf16 kernel computes a row's last ``length % 32`` scores with scalar ``exp`` (16-31 token rows entirely),
    up to 3.6x slower than the fp32 kernel on a cast copy, and its scalar tail rounds differently; where that tail is at
    least a twentieth of the row (and rows are 16+ long) the cast copy is faster here (``benchmarks/RESULTS.md``)."""
    length = scores.shape[-1]
    if length >= 16 and length % 32 >= length / 20:
        return torch.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)
    return torch.softmax(scores, dim=-1)


def _key_lengths(attention_mask: torch.Tensor, batch: int) -> list[int] | None:
    """Each sequence's count of visible keys where the mask hides nothing but right padding (the same prefix of keys
    for every query and head); None for any other mask."""
    keep = attention_mask.expand(batch, -1, -1, -1)
    lengths = keep[:, 0, 0, :].sum(dim=-1)
    prefix = torch.arange(keep.shape[-1]) < lengths[:, None]
    if int(lengths.min()) < 1 or not bool((keep == prefix[:, None, None, :]).all()):
        return None
    return lengths.tolist()


def _blocked_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    *,
    products: str = ONEDNN,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Encoder attention a few sequences at a time, its products in ``products``' kernels; anything else goes to
    transformers' SDPA unchanged."""
    plain = (
        not _inference(module, query)
        or getattr(module, "is_causal", False)
        or dropout
        or key.shape[1] != query.shape[1]
        or (attention_mask is not None and attention_mask.dtype != torch.bool)
    )
    if plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    batch, heads, length, width = query.shape
    scale = scaling if scaling is not None else width**-0.5
    keys = key.shape[2]
    masked = None if attention_mask is None else (~attention_mask).expand(batch, -1, -1, -1)  # True = no attention
    lengths = None if attention_mask is None else _key_lengths(attention_mask, batch)
    padded = None if masked is None or lengths is not None else masked.flatten(1).any(dim=1).tolist()
    out = torch.empty((batch, length, heads, width), dtype=value.dtype)
    step = max(1, SCORES_PER_BLOCK // (heads * length * keys))
    # fp32 kernels: exact float32 copies of the bf16 operands, fp32 scores and probabilities, the output rounded
    compute = value.dtype if products == ONEDNN else torch.float32
    with _fp32_kernels(products):
        for start in range(0, batch, step):
            rows = slice(start, start + step)
            visible, needs_mask = _visible_keys(rows, keys, lengths, padded)
            # contiguous blocks: a strided [heads, length, width] slice of the fused projection multiplies slower
            scores = torch.matmul(
                _own_contiguous(query[rows], compute).mul_(scale),
                _own_contiguous(key[rows, :, :visible], compute).transpose(-1, -2),
            )
            if needs_mask:
                scores.masked_fill_(masked[rows, ..., :visible], float("-inf"))
            out[rows] = torch.matmul(_softmax(scores), value[rows, :, :visible].to(compute)).transpose(1, 2)
    return out, None


def _own_contiguous(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A contiguous copy of ``x`` in ``dtype``, free to write over. ``x.to(dtype, memory_format=contiguous_format)``
    returns ``x`` itself when the dtype already matches (torch keeps a strided view whose suggested format is
    contiguous), so scaling it in place scaled the caller's query (found by the tests on the AMX CPU)."""
    return torch.empty(x.shape, dtype=dtype).copy_(x)


def _visible_keys(rows: slice, keys: int, lengths: list[int] | None, padded: list[bool] | None) -> tuple[int, bool]:
    """How many keys a block of sequences attends to, and whether it still needs the mask."""
    if lengths is not None:  # keys past the block's longest sequence are padding for every row: left out
        visible = max(lengths[rows])
        return visible, min(lengths[rows]) < visible
    return keys, padded is not None and any(padded[rows])


for _products, _name in ATTENTION.items():
    AttentionInterface.register(_name, functools.partial(_blocked_attention, products=_products))
    AttentionMaskInterface.register(_name, sdpa_mask)


PROJECTION_NAMES = (("query", "key", "value"), ("q", "k", "v"), ("q_proj", "k_proj", "v_proj"))


def _swap_linears(network: nn.Module, products: str = ONEDNN) -> tuple[int, int, int]:
    """Replace every ``nn.Linear`` by a ``PackedLinear``, fusing an exact GELU that follows a feed-forward's first
    linear and grouping an attention block's query, key and value projections."""
    fused = 0
    for module in list(network.modules()):
        act, dense = getattr(module, "intermediate_act_fn", None), getattr(module, "dense", None)
        if type(act) is GELUActivation and type(dense) is nn.Linear:  # BERT-family feed-forward: dense, then GELU
            module.dense, module.intermediate_act_fn = PackedLinear(dense, True, products), nn.Identity()
            fused += 1
    swapped = fused
    for module in list(network.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, name, PackedLinear(child, False, products))
                swapped += 1
    groups = 0
    for module in list(network.modules()):
        for names in PROJECTION_NAMES:
            members = [getattr(module, name, None) for name in names]
            if (
                all(isinstance(m, PackedLinear) and not m.gelu for m in members)
                and len({m.in_features for m in members}) == 1
            ):
                group = _Projections(members)
                for member in members:
                    member.group = group
                groups += 1
    return swapped, fused, groups


def prepare(network: nn.Module) -> dict[str, Any]:
    """Switch a transformers network to this path in place, its products in bf16 where this CPU has bf16
    instructions and in fp32 elsewhere; returns what ``backend_config`` records."""
    products = ONEDNN if bf16_instructions() else FP32
    swapped, fused, grouped = _swap_linears(network, products)
    attention = getattr(network.config, "_attn_implementation", None)
    if attention in ("sdpa", "eager") and not getattr(network.config, "is_decoder", False):
        try:
            network.set_attn_implementation(ATTENTION[products])
            attention = ATTENTION[products]
        except (ValueError, AttributeError):  # a model without transformers' attention interface keeps its own
            pass
    config = {"products": products, "linears": swapped, "fused_gelu": fused, "fused_qkv": grouped}
    return {"cpu_bfloat16": {**config, "attention": attention}}
