"""Preference pairs at one step (the `preference` form of `trajforge.generate.rows`).

Three sources, each pair `prompt` = the run's messages before the step, `rejected` = the
run's own action there, `chosen` = an action known to lead to success from the same state:

- `fork_pair`: fork the run just before the step (a labelled mistake, a diagnosed step),
  let a teacher continue in the real environment; when the fork succeeds and its first
  action differs from the run's, that action is chosen (method `fork`);
- `correction_pair`: a stored diagnosis whose correction is an action and was verified
  (by fork, where the run replays) gives chosen = the correction (method: the diagnosis's);
- `sibling_pairs`: rollouts of one task that share a prefix (RFT's k samples): where a
  passing and a failing sibling first part, the passing one's action is chosen over the
  failing one's (method `siblings`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from trajforge.agents.base import Policy
from trajforge.diagnose.model import Diagnosis
from trajforge.envs.base import Environment
from trajforge.envs.replay import replay_to
from trajforge.generate.recovery import action_key
from trajforge.generate.rows import chat_message, preference_row
from trajforge.rollout.episode import Limits, run_episode
from trajforge.schema import Message, Trajectory


def _differs(chosen: Message, rejected: Message) -> bool:
    return action_key(chosen) != action_key(rejected)


def fork_pair(
    env_factory: Callable[[], Environment],
    traj: Trajectory,
    step: int,
    teacher: Policy,
    max_steps: int,
    kind: str = "fork",
) -> dict[str, Any] | None:
    """The pair at message `step`, chosen by a successful fork there (None: the fork failed
    or acted as the run did)."""
    env = env_factory()
    try:
        replay_to(env, traj, step)
        child = Trajectory(
            task=traj.task,
            source=traj.source,
            messages=[m.model_copy(deep=True) for m in traj.messages[:step]],
            tools=traj.tools,
            metadata={"forked_from": traj.id or traj.content_id(), "fork_step": step},
        )
        limits = Limits(max_steps=len(child.assistant_indices()) + max_steps)
        fork = run_episode(env, teacher, traj.task, trajectory=child, limits=limits)
    finally:
        env.close()
    if not fork.outcome.success or len(fork.messages) <= step:
        return None
    chosen = fork.messages[step]
    if chosen.role != "assistant" or not _differs(chosen, traj.messages[step]):
        return None
    extra = {"chosen_run_id": fork.content_id(), "verified": True}
    return preference_row(traj, step, chosen, "pairs", method="fork", kind=kind, extra=extra)


def correction_pair(traj: Trajectory, diagnosis: Diagnosis) -> dict[str, Any] | None:
    """The pair of a verified diagnosis whose correction is a tool call (else None)."""
    correction, step = diagnosis.correction, diagnosis.step
    if not diagnosis.verified or correction is None or correction.tool_call is None:
        return None
    if step is None or step >= len(traj.messages) or traj.messages[step].role != "assistant":
        return None
    chosen = correction.as_message()
    if not _differs(chosen, traj.messages[step]):
        return None
    extra = {"diagnosis_id": diagnosis.id, "category": diagnosis.category, "verified": True}
    return preference_row(
        traj, step, chosen, "pairs", method=diagnosis.method, kind="correction", extra=extra
    )


def sibling_pairs(trajs: Iterable[Trajectory]) -> list[dict[str, Any]]:
    """Pairs where a passing and a failing rollout of one task first part (one per failing
    run, divergence step and chosen action)."""
    by_task: dict[str, list[Trajectory]] = {}
    for traj in trajs:
        by_task.setdefault(traj.task.id, []).append(traj)
    pairs: dict[tuple, dict[str, Any]] = {}
    for runs in by_task.values():
        passing = [t for t in runs if t.outcome.success]
        for failing in (t for t in runs if t.outcome.success is False):
            for winner in passing:
                step = _parting(winner, failing)
                if step is None:
                    continue
                key = (failing.content_id(), step, str(action_key(winner.messages[step])))
                extra = {"chosen_run_id": winner.id or winner.content_id()}
                pairs.setdefault(key, preference_row(
                    failing, step, winner.messages[step], "pairs", method="siblings",
                    kind="siblings", extra=extra,
                ))  # fmt: skip
    return list(pairs.values())


def _parting(winner: Trajectory, loser: Trajectory) -> int | None:
    """The first message where the two runs differ, when both have an action there."""
    for index, (a, b) in enumerate(zip(winner.messages, loser.messages, strict=False)):
        if chat_message(a, first=index == 0) == chat_message(b, first=index == 0):
            continue
        both_act = a.role == b.role == "assistant"
        return index if both_act and _differs(a, b) else None
    return None
