"""``embedkit merge``: an ordinary model folder made from others' weights (``embedkit.train.merge`` has the
arithmetic and the rule for ``alpha="auto"``), with how it was made recorded in ``embedkit_merge.json`` and its card.

- ``tuned`` alone, several folders: their uniform soup (checkpoints of one run).
- ``base`` and ``tuned``: ``(1 - alpha)·base + alpha·tuned`` (the tuned side a soup when several are given).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from embedkit.environment import library_versions
from embedkit.models.loading import load_model
from embedkit.outputs import refuse_inside_other_output, replace_folder
from embedkit.storage import write_json, write_text
from embedkit.train.merge import auto_alpha, average, check_same_architecture, interpolate, merge_summary, state_of
from embedkit.train.merge_settings import ALPHA_RULE, AUTO, MERGED_KIND, RECORD, MergeSettings
from embedkit.training.evaluator import RetrievalEvaluator


def merge_models(settings: MergeSettings, output: str | Path, overwrite: bool = False) -> Path:
    """Write the merged model to ``output`` (a new folder, or an earlier merge with ``overwrite``) and return it."""
    settings.check()
    output = Path(output).absolute()
    refuse_inside_other_output(output, MERGED_KIND)
    models = [load_model(path) for path in settings.tuned]
    network = models[0].st
    states = [state_of(model.st) for model in models]
    names = [str(path) for path in settings.tuned]
    base = load_model(settings.base) if settings.base is not None else None
    if base is not None:
        states.insert(0, state_of(base.st))
        names.insert(0, str(settings.base))
    check_same_architecture(states, names)
    tuned_state = average(states[1:] if base else states)  # one model's average is that model, bit for bit
    record: dict[str, Any] = {"alpha": None, "alpha_rule": None, "dev_scores": None}
    if base is None:
        network.load_state_dict(tuned_state)
    elif settings.alpha == AUTO:
        evaluator = RetrievalEvaluator.of(settings.dev_dataset, settings.dev_split, settings.data_dir,
                                          dtype=settings.dev_dtype)  # fmt: skip
        alpha, scores = auto_alpha(network, states[0], tuned_state, evaluator, settings.alphas, settings.tolerance)
        record |= {"alpha": alpha, "alpha_rule": ALPHA_RULE, "dev_scores": {str(a): s for a, s in scores.items()}}
    else:
        network.load_state_dict(interpolate(states[0], tuned_state, float(settings.alpha)))
        record["alpha"] = float(settings.alpha)
    record = {
        "format": f"embedkit.{MERGED_KIND}/1",
        "settings": asdict(settings),
        "base_model": base.settings if base else None,
        "tuned_models": [model.settings for model in models],
        "soup_steps": None,
        **record,
        "library_versions": library_versions(),
    }
    with replace_folder(output, MERGED_KIND, overwrite) as staging:
        network.save(str(staging))
        write_json(staging / RECORD, record)
        card = staging / "README.md"
        lines = [
            "",
            "## embedkit merge",
            "",
            f"- base: {settings.base}",
            f"- tuned: {', '.join(names[-len(models) :])}",
        ]
        if len(models) > 1:
            lines.append(f"- the tuned side is the uniform average of these {len(models)} models (a soup)")
        text = card.read_text() if card.is_file() else f"# {output.name}\n"
        write_text(card, text + "\n".join([*lines, *merge_summary(record), ""]))
    return output
