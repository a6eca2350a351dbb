""" "Fork from here": the command that forks a run at a message, and running it from the UI
when the run's environment can be rebuilt by replay."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path

from trajforge.agents.gold import GoldPatchSource
from trajforge.envs.registry import ENVIRONMENTS
from trajforge.envs.replay import replayable
from trajforge.errors import UserError
from trajforge.rollout.factory import ForkPoint, build
from trajforge.rollout.fork import check_fork_index, fork
from trajforge.schema import Trajectory
from trajforge.store import Store
from trajforge.web.html import h, run_link
from trajforge.web.params import whole

POLICIES = ("expert", "noisy-expert", "replay", "gold")
"""Policies the UI offers (they need no model endpoint); the command line offers them all."""
MAX_MESSAGES = 10_000_000
"""Bound of a fork point (`check_fork_index` then checks it against the run)."""
MAX_SEED = 2**32 - 1


def default_policy(traj: Trajectory) -> str:
    """`gold` for runs of an environment that knows its reference patch (SWE-bench), else
    the oracle's `expert`."""
    name = traj.task.environment
    env_class = ENVIRONMENTS.get(name) if name and replayable(traj) else None
    if isinstance(env_class, type) and issubclass(env_class, GoldPatchSource):
        return "gold"
    return "expert"


def fork_command(traj: Trajectory, at: int, db: Path, policy: str = "expert") -> str:
    return shlex.join(
        ["trajforge", "fork", traj.id, "--at", str(at), "--policy", policy, "--db", str(db)]
    )


def fork_form(traj: Trajectory, at: int, db: Path, token_field: str) -> str:
    """The page: the command, and a form (with `token_field`, the form token) that runs it."""
    check_fork_index(traj, at)
    policy = default_policy(traj)
    command = fork_command(traj, at, db, policy)
    head = (
        f"<h1>Fork {run_link(traj.id)} at message {at}</h1>"
        f"<p>The child keeps the first {at} messages and continues from the identical state. "
        f"On the command line:</p><pre class=command id=fork-command>{h(command)}</pre>"
        "<p class=dim>(--policy llm with --base-url and --llm-model continues with a model)</p>"
    )
    if not replayable(traj):
        return head + (
            f'<p id="not-forkable">This run cannot be forked here: its environment '
            f"({h(traj.task.environment or 'none')}) cannot be rebuilt by replaying the "
            "recorded tool calls.</p>"
        )
    ordered = [policy, *(p for p in POLICIES if p != policy)]
    options = "".join(f"<option>{p}</option>" for p in ordered)
    return head + (
        f'<form method="post" action="/runs/{h(traj.id)}/fork" id="fork-form">{token_field}'
        f'<input type="hidden" name="at" value="{at}">'
        f"<label>policy <select name=policy>{options}</select></label> "
        '<label>seed <input name="seed" value="0" size=4></label> '
        "<button>Fork and open the child</button></form>"
    )


def run_fork(db: Path, parent_id: str, form: Mapping[str, object]) -> str:
    """Fork in this (worker) thread with its own store connection; returns the child id."""
    policy = str(form.get("policy") or "expert")
    if policy not in POLICIES:
        raise UserError(f"policy must be one of {', '.join(POLICIES)}, got '{policy}'")
    at = whole(form, "at", high=MAX_MESSAGES)
    seed = whole(form, "seed", 0, high=MAX_SEED)
    with Store(db) as store:
        parent = store.get(parent_id)
        check_fork_index(parent, at)
        policy_obj, user = build(policy, seed, ForkPoint(parent, at))
        child = fork(parent, at, policy_obj, user=user)
        with store.transaction():
            store.add(child)
    return child.id
