"""Structure prediction: targets in (:mod:`.targets`), the run (:mod:`.runner`), files out
(:mod:`.outputs`), seconds and memory per stage (:mod:`.timings`)."""

from .runner import PredictionRun, TargetResult, predict
from .targets import PredictError, Target, collect_targets

__all__ = ["PredictError", "PredictionRun", "Target", "TargetResult", "collect_targets", "predict"]
