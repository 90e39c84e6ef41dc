"""The default model's forward alone, per batch shape: plain bf16 autocast against the CPU bfloat16 path's levers.

    python benchmarks/encode_forward.py                          # 16x256, 32x128, 128x32; 7 alternating rounds
    python benchmarks/encode_forward.py --shapes 16x256 --blocks 1048576,4194304,16777216

Rows: ``autocast`` (the float32 network under ``torch.autocast("cpu", bfloat16)``: what sentence-transformers runs),
``packed + SDPA`` (``models/cpu_bfloat16.py``'s oneDNN linears with transformers' SDPA attention) and ``packed +
blocked`` (``load_model(dtype="bfloat16", backend="torch")``: the linears and the cache-blocked attention), the latter
once per ``--blocks`` value (scores per attention block). Random token ids, one padded row per batch; each round runs
every row once, medians are printed with the ratio to autocast and the minimum cosine of the mean-pooled output to it.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F

from embedkit import load_model
from embedkit.models import cpu_bfloat16, heap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="16x256,32x128,128x32", help="batch x length, comma-separated")
    parser.add_argument("--blocks", default=str(cpu_bfloat16.SCORES_PER_BLOCK), help="scores per attention block")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    malloc = heap.steady()  # as embedkit's encode sets it; process-wide, so the autocast row runs under it too
    reference = load_model(device="cpu").st[0].auto_model.eval()
    packed = load_model(device="cpu", dtype="bfloat16", backend="torch").st[0].auto_model.eval()
    with_sdpa = copy.deepcopy(packed)
    with_sdpa.set_attn_implementation("sdpa")
    rows = {"autocast": (reference, None), "packed + SDPA": (with_sdpa, None)}
    for block in (int(b) for b in args.blocks.split(",")):
        rows[f"packed + blocked ({block} scores)"] = (packed, block)

    def forward(network, block, ids, mask) -> torch.Tensor:
        if block:
            cpu_bfloat16.SCORES_PER_BLOCK = block
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            hidden = network(input_ids=ids, attention_mask=mask).last_hidden_state.float()
        return (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)

    torch.manual_seed(0)
    print(f"{torch.get_num_threads()} threads, {args.rounds} rounds, median ms; malloc: {malloc}")
    for shape in args.shapes.split(","):
        batch, length = (int(n) for n in shape.split("x"))
        ids = torch.randint(1000, 20000, (batch, length))
        mask = torch.ones(batch, length, dtype=torch.long)
        mask[min(1, batch - 1), length // 2 :] = 0
        pooled = {name: forward(net, block, ids, mask) for name, (net, block) in rows.items()}  # warm-up + vectors
        seconds: dict[str, list[float]] = {name: [] for name in rows}
        for _ in range(args.rounds):
            for name, (net, block) in rows.items():
                start = time.perf_counter()
                forward(net, block, ids, mask)
                seconds[name].append(time.perf_counter() - start)
        base = statistics.median(seconds["autocast"])
        for name in rows:
            median = statistics.median(seconds[name])
            cosine = F.cosine_similarity(pooled[name], pooled["autocast"]).min().item()
            print(f"{shape:>8} {name:36s} {median * 1000:7.1f} ms  x{base / median:.2f}  cosine {cosine:.6f}")


if __name__ == "__main__":
    main()
