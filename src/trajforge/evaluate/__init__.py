"""Evaluation: fault robustness and pass^k."""

from trajforge.evaluate.robustness import (
    BASELINE,
    ConditionReport,
    KindReport,
    pass_hat_k,
    robustness_report,
)

__all__ = ["BASELINE", "ConditionReport", "KindReport", "pass_hat_k", "robustness_report"]
