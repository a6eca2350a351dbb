"""Which dataset and log format a run belongs to, and agent names compared across formats.

Out-of-sample evaluation splits by dataset (a method tuned on one is scored on the others)
and priors are learned per log format, so every run needs both keys:

- dataset: `who-and-when/algorithm-generated`, `who-and-when/hand-crafted`,
  `synthetic/<environment>` (noisy-expert failures), else `<format>/<environment>`;
- log format: `multi-agent/<harness>` for logs whose messages carry speaker names, else
  `tool-calling/<environment>`.

Agent names are matched case-insensitively and across the speaker conventions of both
Who&When subsets: `Orchestrator (thought)` and `Orchestrator (-> WebSurfer)` are the
orchestrator, `Websurfer` is `WebSurfer`, `Computer_terminal` is `computer terminal`.
"""

from __future__ import annotations

import re

from trajforge.diagnose.evidence import is_multi_agent
from trajforge.schema import Trajectory

SYNTHETIC_MODEL = "noisy-expert"
_SUFFIX = re.compile(r"\s*\(.*\)\s*$")
_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def dataset_of(traj: Trajectory) -> str:
    """The dataset a run comes from (see module docstring)."""
    source, environment = traj.source, traj.task.environment or "unknown"
    if source.format == "who-and-when" or environment == "who-and-when":
        subset = "hand-crafted" if "hand" in (source.run or "").lower() else "algorithm-generated"
        return f"who-and-when/{subset}"
    if source.model == SYNTHETIC_MODEL:
        return f"synthetic/{environment}"
    return f"{source.format or source.harness or 'unknown'}/{environment}"


def log_format(traj: Trajectory) -> str:
    """The shape of the log a prior is learned for (see module docstring)."""
    if is_multi_agent(traj):
        return f"multi-agent/{traj.source.harness or dataset_of(traj)}"
    return f"tool-calling/{traj.task.environment or 'unknown'}"


def agent_key(name: str | None) -> str | None:
    """An agent name reduced for comparison: lower case, no `(thought)` / `(-> X)` suffix,
    punctuation and underscores folded to nothing."""
    if not name:
        return None
    base = _SUFFIX.sub("", name.strip()) or name
    return _NON_ALNUM.sub("", base.lower()) or None


def same_agent(predicted: str | None, labelled: str | None) -> bool:
    """Whether two agent names denote the same agent (see `agent_key`)."""
    key = agent_key(labelled)
    return key is not None and agent_key(predicted) == key
