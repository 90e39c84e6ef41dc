"""Run under ``torchrun --nproc_per_node=2``: each rank takes its slice of a fixed batch, computes the cross-device
InfoNCE loss, and back-propagates; rank 0 writes the averaged loss and gradients (what DDP applies) as .npy files.

    torchrun --standalone --nproc_per_node=2 tests/workers/cross_device.py MODEL_DIR BATCH_JSON OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist


def main(model_dir: str, batch_json: str, out_dir: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    from embedkit import load_model
    from embedkit.train.losses import build_loss

    model = load_model(model_dir, pooling="mean", device="cpu").st
    model.eval().double()  # no dropout, float64: every process computes the single-process reference function
    columns = json.loads(Path(batch_json).read_text())
    per_rank = len(columns[0]) // world
    local = [column[rank * per_rank : (rank + 1) * per_rank] for column in columns]
    loss_fn = build_loss(model, "infonce", temperature=0.05)
    assert loss_fn.gather_across_devices, "build_loss must gather across devices under torchrun"
    loss = loss_fn([model.preprocess(column) for column in local], torch.zeros(per_rank))
    loss.backward()
    total = loss.detach().clone()
    dist.all_reduce(total)
    for parameter in model.parameters():
        if parameter.grad is not None:
            dist.all_reduce(parameter.grad)
            parameter.grad /= world
    if rank == 0:
        out = Path(out_dir)
        np.save(out / "loss.npy", (total / world).numpy())
        for name, parameter in model.named_parameters():
            if parameter.grad is not None:
                np.save(out / f"grad.{name}.npy", parameter.grad.numpy())
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
