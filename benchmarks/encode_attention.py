"""Attention and GELU variants of the CPU bfloat16 path that issue 16 tried and did not keep, against the default.

    python benchmarks/encode_attention.py                      # one forward per set, on one thread, 7 rounds
    python benchmarks/encode_attention.py --encode --rounds 5  # whole encodes on every thread (encode streams)

Each variant replaces one piece of ``models/cpu_bfloat16.py`` and alternates with the committed path in one process
(the order reversed every other round; medians). Forward sets: the first 8 documents (8x256), 85 training queries of
24 tokens, 11 documents of 185 tokens (batches of the encode's 2,048-token budget). Encode sets: 1,000 documents, the
809 training queries, 1,000 documents cut to 64 word pieces. Printed per set and variant: ms per forward or texts/s,
the ratio to the default, the min cosine of the real tokens' states (forward) or of the embeddings (encode) to the
default's, and the count of embeddings that are not finite. RESULTS.md has the verdicts; none was kept.

- ``unfused-gelu``: the feed-forward's first linear without its fused GELU, ``GELUActivation`` after it (autocast's
  own arithmetic). Alone, the fused post-op costs more than a separate pass; in the model it does not.
- ``exp-unshifted``: the softmax replaced by ``exp`` in place, fp32 row sums, p·v, and the division fused into the
  output copy, with no maximum subtracted. **Unsafe**, here only as the ceiling of any softmax rewrite: SciFact's
  scaled scores reach 93.5, ``exp`` times the values overflows, and one of the first 1,000 documents comes out NaN.
- ``exp-bound-shift``: the same, each row shifted by a Cauchy-Schwarz bound of its largest score (``|q_i| max_j
  |k_j|``) folded into q·kᵀ as an extra column; a block with a row sum below 1e-30 falls back to the softmax.
- ``length-groups``: attention blocks cut wherever the sequence length changes, so that no block needs a mask.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Iterator

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch
from encode_conditions import benchmark_texts
from transformers import AttentionInterface
from transformers.activations import GELUActivation

from embedkit import load_model
from embedkit.models import cpu_bfloat16, heap
from embedkit.models.cpu_bfloat16 import _key_lengths, _softmax

DATASET = "scifact"


def _blocks(lengths: list[int] | None, batch: int, heads: int, length: int, keys: int, groups: bool) -> Iterator:
    """(rows, visible keys, needs a mask) per block, as the committed attention cuts them, or by equal lengths."""
    if groups and lengths is not None:
        start = 0
        while start < batch:
            end = start + 1
            while end < batch and lengths[end] == lengths[start]:
                end += 1
            step = max(1, cpu_bfloat16.SCORES_PER_BLOCK // (heads * length * lengths[start]))
            for first in range(start, end, step):
                yield slice(first, min(end, first + step)), lengths[start], False
            start = end
        return
    step = max(1, cpu_bfloat16.SCORES_PER_BLOCK // (heads * length * keys))
    for first in range(0, batch, step):
        rows = slice(first, first + step)
        if lengths is None:
            yield rows, keys, True
        else:
            yield rows, max(lengths[rows]), min(lengths[rows]) < max(lengths[rows])


def _attention(normalise: str = "softmax", groups: bool = False) -> Callable:
    """An encoder attention for the path's inference case (right-padded masks), by the variant's rule."""

    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        batch, heads, length, width = query.shape
        scale = scaling if scaling is not None else width**-0.5
        masked = None if attention_mask is None else (~attention_mask).expand(batch, -1, -1, -1)
        lengths = None if attention_mask is None else _key_lengths(attention_mask, batch)
        out = torch.empty((batch, length, heads, width), dtype=value.dtype)
        for rows, visible, needs_mask in _blocks(lengths, batch, heads, length, key.shape[2], groups):
            q = query[rows].contiguous().mul_(scale)
            k = key[rows, :, :visible].contiguous()
            if normalise == "exp-bound-shift":  # two more columns: the shift, and a zero (bf16 wants even widths)
                norms = torch.linalg.vector_norm(k, dim=-1, dtype=torch.float32).amax(-1, keepdim=True)
                shift = -torch.linalg.vector_norm(q, dim=-1, dtype=torch.float32) * norms
                q = torch.cat([q, shift[..., None].to(q.dtype), torch.zeros_like(q[..., :1])], dim=-1)
                k = torch.cat([k, torch.ones_like(k[..., :1]), torch.zeros_like(k[..., :1])], dim=-1)
            scores = torch.matmul(q, k.transpose(-1, -2))
            if needs_mask and masked is not None:
                scores.masked_fill_(masked[rows, ..., :visible], float("-inf"))
            if normalise != "softmax":
                probs = scores.exp_()
                sums = probs.sum(-1, keepdim=True, dtype=torch.float32)
                if normalise == "exp-unshifted" or float(sums.amin()) > 1e-30:
                    product = torch.matmul(probs, value[rows, :, :visible])
                    torch.div(product.transpose(1, 2), sums.transpose(1, 2), out=out[rows])
                    continue
                scores = torch.matmul(q[..., :width], k[..., :width].transpose(-1, -2))
                if needs_mask and masked is not None:
                    scores.masked_fill_(masked[rows, ..., :visible], float("-inf"))
            out[rows] = torch.matmul(_softmax(scores), value[rows, :, :visible]).transpose(1, 2)
        return out, None

    return attention


def _set_gelu(network: torch.nn.Module, fused: bool) -> None:
    for module in network.modules():
        if hasattr(module, "intermediate_act_fn") and isinstance(module.dense, cpu_bfloat16.PackedLinear):
            module.dense.gelu = fused
            module.intermediate_act_fn = torch.nn.Identity() if fused else GELUActivation()


VARIANTS: dict[str, dict] = {
    "default": {},
    "unfused-gelu": {"fused_gelu": False},
    "exp-unshifted": {"attention": _attention("exp-unshifted")},
    "exp-bound-shift": {"attention": _attention("exp-bound-shift")},
    "length-groups": {"attention": _attention(groups=True)},
}


def _budget_batch(model, texts: list[str], rank: int) -> list[str]:
    """The texts a 2,048-token batch holds, starting at the ``rank``-th longest."""
    lengths = [len(ids) for ids in model.st.tokenizer(texts, truncation=True, max_length=256)["input_ids"]]
    order = np.argsort(lengths, kind="stable")[::-1]
    return [texts[i] for i in order[rank : rank + 2048 // lengths[order[rank]]]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encode", action="store_true", help="whole encodes instead of one forward per set")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--variants", default=",".join(list(VARIANTS)[1:]))
    args = parser.parse_args()
    heap.steady()
    model = load_model(device="cpu", dtype="bfloat16", backend="torch")
    network = model.st[0].auto_model
    docs = benchmark_texts(DATASET, "docs", "1000", None)
    queries = benchmark_texts(DATASET, "train-queries", "all", None)
    if args.encode:
        sets = {
            "1,000 documents": docs,
            "809 queries": queries,
            "64-token documents": benchmark_texts(DATASET, "docs", "1000", 64),
        }
    else:
        torch.set_num_threads(1)
        sets = {
            "8x256 documents": docs[:8],
            "queries": _budget_batch(model, queries, 300),
            "short documents": _budget_batch(model, docs, 900),
        }
    names = ["default", *args.variants.split(",")]

    def run(name: str, texts: list[str]) -> tuple[float, np.ndarray]:
        variant = VARIANTS[name]
        AttentionInterface.register(cpu_bfloat16.ATTENTION, variant.get("attention", cpu_bfloat16._blocked_attention))
        _set_gelu(network, variant.get("fused_gelu", True))
        features = None if args.encode else model.st.preprocess(texts)
        start = time.perf_counter()
        if features is None:
            vectors = model.encode(texts, show_progress=False)
            seconds = time.perf_counter() - start
            return len(texts) / seconds, vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        with torch.inference_mode():
            hidden = network(input_ids=features["input_ids"], attention_mask=features["attention_mask"])[0]
        real = hidden[features["attention_mask"].bool()].float()
        return (time.perf_counter() - start) * 1000, torch.nn.functional.normalize(real, dim=-1).numpy()

    unit = "texts/s" if args.encode else "ms"
    print(f"{torch.get_num_threads()} threads, {args.rounds} rounds, medians")
    for set_name, texts in sets.items():
        run("default", texts)  # warm-up
        values: dict[str, list[float]] = {name: [] for name in names}
        vectors: dict[str, np.ndarray] = {}
        for round_number in range(args.rounds):
            for name in names if round_number % 2 == 0 else names[::-1]:
                value, vectors[name] = run(name, texts)
                values[name].append(value)
        base = statistics.median(values["default"])
        for name in names:
            median = statistics.median(values[name])
            ratio = median / base if args.encode else base / median
            finite = np.isfinite(vectors[name]).all(axis=1)
            cosine = (vectors[name][finite] * vectors["default"][finite]).sum(axis=1).min()
            print(
                f"{set_name:20s} {name:16s} {median:8.1f} {unit}  x{ratio:.3f}  min cosine {cosine:.6f}"
                f"  not finite {int((~finite).sum())}"
            )


if __name__ == "__main__":
    main()
