"""Stage 6: trec_eval-exact metrics (pytrec_eval, as BEIR and MTEB call it) and the end-to-end pipeline."""

from embedkit.evaluation.metrics import METRIC_NAMES, compute_metrics
from embedkit.evaluation.pipeline import evaluate

__all__ = ["METRIC_NAMES", "compute_metrics", "evaluate"]
