"""The stop rule: stop a run at the first step (from `min_step` on) whose risk reaches a
threshold; thresholds are chosen on training runs for a target share of successful runs
stopped (the "loss").
"""

from __future__ import annotations

import numpy as np

DEFAULT_LOSSES = (0.01, 0.02, 0.05, 0.1)


def stop_step(risks: np.ndarray, threshold: float, min_step: int = 1) -> int | None:
    """The 1-based step at which the rule stops, or None. `risks[k-1]` is the risk after step k.

    The last step is never a stop: the run is over by then.
    """
    decided = risks[: len(risks) - 1]
    hits = np.flatnonzero(decided[min_step - 1 :] >= threshold)
    return int(hits[0]) + min_step if hits.size else None


def max_decided_risk(risks: np.ndarray, min_step: int = 1) -> float:
    """The highest risk over the steps the rule decides on (-inf when there are none)."""
    decided = risks[min_step - 1 : len(risks) - 1]
    return float(decided.max()) if decided.size else float("-inf")


def threshold_for_loss(success_max_risks: list[float], loss: float) -> float:
    """The lowest threshold that stops at most `loss` of the given successful runs.

    `success_max_risks` are the per-run maxima of `max_decided_risk` on successful runs.
    """
    ranked = sorted(success_max_risks, reverse=True)
    if not ranked:
        return 1.0
    allowed = int(np.floor(loss * len(ranked) + 1e-9))
    if allowed >= len(ranked):
        return float(ranked[-1])
    return float(np.nextafter(ranked[allowed], np.inf))


def thresholds_for_losses(
    run_risks: list[np.ndarray],
    failed: list[bool],
    min_step: int,
    losses: tuple[float, ...] = DEFAULT_LOSSES,
) -> dict[str, float]:
    """{str(loss): threshold} from the risk curves of training runs and their labels."""
    maxima = [
        max_decided_risk(r, min_step) for r, f in zip(run_risks, failed, strict=True) if not f
    ]
    return {str(loss): threshold_for_loss(maxima, loss) for loss in losses}
