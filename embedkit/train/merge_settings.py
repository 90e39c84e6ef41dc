"""What ``embedkit merge`` and ``train --merge-with-base`` are told, checked before torch loads."""

from __future__ import annotations

from dataclasses import dataclass

from embedkit.errors import EmbedkitError
from embedkit.models.options import DTYPE_NAMES
from embedkit.validation import check_number

ALPHA_GRID = tuple(i / 10 for i in range(11))
TOLERANCE = 0.005  # nDCG@10 on the dev set
AUTO = "auto"
ALPHA_RULE = "chosen on the dev set: the smallest alpha whose dev nDCG@10 is within the tolerance of the best"
MERGED_KIND = "merged-model"
RECORD = "embedkit_merge.json"


@dataclass(frozen=True)
class MergeSettings:
    """``alpha`` is the tuned side's weight (a number in [0, 1] or ``"auto"``, which needs ``dev_dataset``)."""

    tuned: tuple[str, ...]
    base: str | None = None
    alpha: float | str | None = None
    dev_dataset: str | None = None
    dev_split: str = "dev"
    dev_dtype: str = "float32"
    tolerance: float = TOLERANCE
    alphas: tuple[float, ...] = ALPHA_GRID
    data_dir: str | None = None

    def check(self) -> None:
        if not self.tuned:
            raise EmbedkitError("give the fine-tuned model (--tuned), or several checkpoints to average", field="tuned")
        if self.base is None and self.alpha is not None:
            raise EmbedkitError("an alpha interpolates with the base model: give --base too", field="alpha")
        if self.base is not None and self.alpha is None:
            raise EmbedkitError("interpolating with --base needs --alpha (a number in [0, 1] or auto)", field="alpha")
        if self.base is None and len(self.tuned) < 2:
            raise EmbedkitError(
                "one model alone: give --base and --alpha, or several --tuned to average", field="tuned"
            )
        if self.alpha == AUTO and not self.dev_dataset:
            raise EmbedkitError("--alpha auto chooses on a dev set: give --dev-dataset", field="dev_dataset")
        if self.alpha != AUTO and self.alpha is not None:
            check_number(self.alpha, "alpha", minimum=0, maximum=1)
        if self.dev_dtype not in DTYPE_NAMES:
            raise EmbedkitError(f"unknown dtype '{self.dev_dtype}' ({' | '.join(DTYPE_NAMES)})", field="dev_dtype")
        check_number(self.tolerance, "tolerance", minimum=0, maximum=1)
        if not self.alphas:
            raise EmbedkitError("the alpha grid is empty", field="alphas")
        for i, alpha in enumerate(self.alphas):
            check_number(alpha, f"alphas[{i}]", minimum=0, maximum=1)


def parse_alpha(text: str | float | None) -> float | str | None:
    """``auto``, or the number the option's text spells."""
    if text is None or text == AUTO or not isinstance(text, str):
        return text
    try:
        return float(text)
    except ValueError:
        raise EmbedkitError(f"expected a number in [0, 1] or auto, not {text!r}", field="alpha") from None
