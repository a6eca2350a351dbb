"""Evidence heuristics: localize the decisive error from the recorded messages alone.

- `gold`: runs whose task carries gold actions (tau-bench): the first wrong write, or the
  omission at the end.
- `multi_agent`: multi-agent conversation logs (Who&When).
- `tool_log`: other tool-calling logs: unauthenticated or unconfirmed writes, ignored tool
  errors, repeated calls, else the last step.
"""

from __future__ import annotations

from trajforge.diagnose.evidence import is_multi_agent
from trajforge.diagnose.heuristics.gold import localize_by_gold
from trajforge.diagnose.heuristics.multi_agent import localize_multi_agent
from trajforge.diagnose.heuristics.tool_log import localize_tool_log
from trajforge.diagnose.model import Diagnosis
from trajforge.schema import Trajectory


def localize_heuristic(traj: Trajectory) -> Diagnosis | None:
    """The heuristic diagnosis of a failed run (None when nothing can be said)."""
    if is_multi_agent(traj):
        return localize_multi_agent(traj)
    return localize_by_gold(traj) or localize_tool_log(traj)


__all__ = ["localize_by_gold", "localize_heuristic", "localize_multi_agent", "localize_tool_log"]
