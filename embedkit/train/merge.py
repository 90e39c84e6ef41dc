"""Weight-space merging: a fine-tuned model interpolated with the model it started from (WiSE-FT, Wortsman et al.,
2022) and a uniform soup of checkpoints (model soups, Wortsman et al., 2022).

Fine-tuning on one collection buys in-domain quality with forgetting elsewhere; ``(1 - alpha)·base + alpha·tuned``
trades one for the other with a single number, and averaging a run's last checkpoints smooths its end. Both act on
every tensor of a whole sentence-transformers stack (the transformer and any Dense layer), which must match in names
and shapes; integer buffers (position ids) must be equal and are copied. The arithmetic is float64, stored back in
each tensor's dtype, so alpha 0 and 1 give the base and tuned tensors bit for bit.

``alpha="auto"`` scores ``ALPHA_GRID`` on a dev set and keeps the alpha nearest the base whose dev nDCG@10 is within
``tolerance`` of the best one's (``choose_alpha``). A dev set drawn from the fine-tuning domain cannot see forgetting
elsewhere, so among the alphas it cannot tell apart the rule keeps the one that moves least from the base.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from embedkit.errors import EmbedkitError
from embedkit.train.merge_settings import ALPHA_GRID, TOLERANCE
from embedkit.training.run_folder import checkpoint_folders, checkpoint_step
from embedkit.validation import check_number

State = dict[str, torch.Tensor]


def state_of(network: torch.nn.Module) -> State:
    """A detached copy of every tensor of ``network`` (its weights change when a merge is loaded into it)."""
    return {name: tensor.detach().clone() for name, tensor in network.state_dict().items()}


def check_same_architecture(states: Sequence[Mapping[str, torch.Tensor]], names: Sequence[str]) -> None:
    """Every state has the first one's tensor names and shapes, and its integer buffers."""
    first, first_name = states[0], names[0]
    for state, name in zip(states[1:], names[1:], strict=True):
        if missing := sorted(set(first) ^ set(state)):
            raise EmbedkitError(
                f"is not the same architecture as {first_name}: tensors differ ({', '.join(missing[:3])}"
                f"{', ...' if len(missing) > 3 else ''})",
                path=name,
            )
        for key, tensor in first.items():
            other = state[key]
            if other.shape != tensor.shape:
                shapes = f"{tuple(other.shape)} against {tuple(tensor.shape)}"
                raise EmbedkitError(f"is not the same architecture as {first_name}: {key} is {shapes}", path=name)
            if not tensor.is_floating_point() and not torch.equal(tensor, other):
                raise EmbedkitError(f"differs from {first_name} in the integer buffer {key}", path=name)


def interpolate(base: Mapping[str, torch.Tensor], tuned: Mapping[str, torch.Tensor], alpha: float) -> State:
    """``(1 - alpha)·base + alpha·tuned`` for every floating tensor; integer buffers copied from ``tuned``."""
    check_number(alpha, "alpha", minimum=0, maximum=1)
    merged = {}
    for key, tensor in tuned.items():
        if tensor.is_floating_point():
            mixed = (1 - alpha) * base[key].double() + alpha * tensor.double()
            merged[key] = mixed.to(tensor.dtype)
        else:
            merged[key] = tensor.clone()
    return merged


def average(states: Sequence[Mapping[str, torch.Tensor]]) -> State:
    """The uniform soup: the mean of every floating tensor over ``states``; integer buffers from the first."""
    soup = {}
    for key, tensor in states[0].items():
        if tensor.is_floating_point():
            soup[key] = (sum(state[key].double() for state in states) / len(states)).to(tensor.dtype)
        else:
            soup[key] = tensor.clone()
    return soup


def choose_alpha(dev_scores: Mapping[float, float], tolerance: float = TOLERANCE) -> float:
    """The smallest alpha (nearest the base) whose dev score is within ``tolerance`` of the best dev score."""
    best = max(dev_scores.values())
    return min(alpha for alpha, score in dev_scores.items() if score >= best - tolerance)


def auto_alpha(
    network: Any,
    base: State,
    tuned: State,
    evaluator: Any,
    alphas: Sequence[float] = ALPHA_GRID,
    tolerance: float = TOLERANCE,
) -> tuple[float, dict[float, float]]:
    """Score each alpha's merge on ``evaluator`` (a ``RetrievalEvaluator``) and choose by ``choose_alpha``; the
    network is left holding the chosen merge."""
    scores = {}
    for alpha in alphas:
        network.load_state_dict(interpolate(base, tuned, alpha))
        scores[alpha] = evaluator.score(network)["ndcg_at_10"]
    chosen = choose_alpha(scores, tolerance)
    network.load_state_dict(interpolate(base, tuned, chosen))
    return chosen, scores


def soup_of_checkpoints(network: Any, checkpoints: Path, last: int) -> list[int]:
    """Load the uniform soup of the last ``last`` checkpoints into ``network``; returns their steps."""
    folders = checkpoint_folders(checkpoints)[-last:]
    if len(folders) < last:
        raise EmbedkitError(
            f"a soup of the last {last} checkpoints needs {last} saved; this run saved {len(folders)} "
            "(lower --soup-last, or save more often with --save-steps or --eval-steps)",
            field="soup_last",
        )
    states = [state_of(type(network)(str(folder), device=str(network.device))) for folder in folders]
    check_same_architecture([state_of(network), *states], ["the model trained", *map(str, folders)])
    network.load_state_dict(average(states))
    return [checkpoint_step(folder) for folder in folders]


TRAINER_STATE = ("optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json", "training_args.bin")


def keep_checkpoints(checkpoints: Path, target: Path) -> list[str]:
    """Copy each checkpoint's model (not the optimizer and Trainer state) to ``target/checkpoint-N``, loadable like
    any model folder; returns their names."""
    kept = []
    for folder in checkpoint_folders(checkpoints):
        shutil.copytree(folder, target / folder.name, ignore=lambda _, names: [n for n in names if n in TRAINER_STATE])
        kept.append(folder.name)
    return kept


def merge_summary(merge: Mapping[str, Any] | None) -> list[str]:
    """Card lines saying how the saved weights were made from the base model, the tuned weights or checkpoints."""
    if not merge:
        return []
    lines = []
    if merge.get("soup_steps"):
        lines.append(f"- weights: the uniform average of the checkpoints of steps {merge['soup_steps']} (a soup)")
    if merge.get("alpha") is not None:
        rule = merge.get("alpha_rule") or "given"
        lines.append(
            f"- weights: (1 - {merge['alpha']:g})·base + {merge['alpha']:g}·tuned, interpolated with the base model "
            f"(WiSE-FT); alpha {rule}"
        )
    if merge.get("dev_scores"):
        scores = ", ".join(f"{float(a):g}: {s:.4f}" for a, s in merge["dev_scores"].items())
        lines.append(f"- dev nDCG@10 by alpha: {scores}")
    return lines
