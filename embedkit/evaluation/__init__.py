"""Stage 6: trec_eval-exact metrics (pytrec_eval, as BEIR and MTEB call it) and the end-to-end pipeline."""

from typing import TYPE_CHECKING

from embedkit._lazy import lazy_exports

_EXPORTS = {
    "METRIC_NAMES": "embedkit.evaluation.metrics",
    "compute_metrics": "embedkit.evaluation.metrics",
    "EvaluateOptions": "embedkit.evaluation.pipeline",
    "evaluate": "embedkit.evaluation.pipeline",
}
__all__ = [
    "METRIC_NAMES",
    "EvaluateOptions",
    "compute_metrics",
    "evaluate",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from embedkit.evaluation.metrics import METRIC_NAMES, compute_metrics
    from embedkit.evaluation.pipeline import EvaluateOptions, evaluate
