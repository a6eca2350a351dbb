"""A chat model as a prefix monitor: it reads a run so far and estimates its failure risk.

The learned detector counts behaviour; on SWE-bench most failures are plausible fixes that fail
the hidden tests (see the README's headroom section), which only reading the work can judge.
`PrefixJudge` asks any OpenAI-compatible model for the probability that the run will end
unsuccessfully, seeing exactly what the monitor would see after step k: the task and
`messages[: steps[k-1].end]`, nothing later. It answers through one function call,
`report_failure_risk` (a JSON object in its text is accepted too; `models.structured`).

`judge_at_step` scores the runs still going at step k concurrently and reports AUROC / AUPRC
of the judge's estimates, so a model can be compared with the detectors on the same runs
(`trajforge monitor judge`). Nothing is fitted: the judge is an option for those who have an
endpoint; the detectors need none.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from pydantic import BaseModel, Field
from sklearn.metrics import average_precision_score, roc_auc_score

from trajforge.diagnose.transcript import transcript
from trajforge.errors import UserError
from trajforge.models.base import ChatModel
from trajforge.models.retry import Asked, ask_parsed
from trajforge.models.structured import function_answer
from trajforge.monitor.steps import require_steps
from trajforge.schema import Message, Trajectory

RISK_TOOL = "report_failure_risk"

SYSTEM = (
    "You monitor a software or tool-using agent while it works. You see the task and the run "
    "so far; the run is not finished. Estimate the probability that it will end unsuccessfully "
    "(its final result fails the task's checks), judging whether the agent understands the "
    "problem, whether its changes address what the task asks, and whether it is stuck. Answer "
    f"by calling {RISK_TOOL}."
)


class PrefixJudgeConfig(BaseModel):
    """How the judge reads a prefix."""

    max_message_chars: int = Field(
        default=1500, description="Longer messages keep their start and end."
    )
    max_run_chars: int = Field(
        default=48_000, description="Older steps are left out beyond this many characters."
    )
    max_task_chars: int = Field(default=8000, description="The task text is cut to this.")


def risk_tool() -> dict[str, Any]:
    """The function schema the judge answers through."""
    properties = {
        "failure_probability": {"type": "number", "minimum": 0, "maximum": 1},
        "reason": {"type": "string", "description": "One or two sentences."},
    }
    return {
        "type": "function",
        "function": {
            "name": RISK_TOOL,
            "description": "Report the probability that this run will fail.",
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": ["failure_probability"],
            },
        },
    }


def prefix_prompt(traj: Trajectory, step: int, config: PrefixJudgeConfig) -> list[Message]:
    """The judge's messages for the run after step `step` (1-based): nothing later is shown."""
    steps = require_steps(traj)
    if not 1 <= step <= len(steps):
        raise UserError(f"run {traj.id[:12]} has {len(steps)} steps; cannot judge step {step}")
    first = steps[0].index
    shown = traj.messages[first : steps[step - 1].end]
    run_text, omitted = _fit(shown, config)
    task = (traj.task.instruction or traj.task.id)[: config.max_task_chars]
    note = f"[{omitted} earlier messages left out]\n" if omitted else ""
    prompt = (
        f"Task:\n{task}\n\nRun so far ({step} agent steps):\n{note}{run_text}\n\n"
        "How likely is this run to fail?"
    )
    return [Message(role="system", content=SYSTEM), Message(role="user", content=prompt)]


def _fit(messages: list[Message], config: PrefixJudgeConfig) -> tuple[str, int]:
    """The transcript of the latest messages that fit `max_run_chars`, and how many were cut."""
    for omitted in range(len(messages)):
        text = transcript(messages[omitted:], config.max_message_chars)
        if len(text) <= config.max_run_chars:
            return text, omitted
    return transcript(messages[-1:], config.max_message_chars), len(messages) - 1


def parse_risk(reply: Message) -> float | None:
    """The failure probability in the judge's reply; None when there is none in [0, 1]."""
    value = (function_answer(reply, RISK_TOOL) or {}).get("failure_probability")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 <= value <= 1 else None


class PrefixJudge:
    """Failure risk of a run prefix from a chat model (see module docstring)."""

    def __init__(self, model: ChatModel, config: PrefixJudgeConfig | None = None) -> None:
        self.model = model
        self.config = config or PrefixJudgeConfig()

    def risk(self, traj: Trajectory, step: int) -> Asked[float]:
        """The judge's failure probability for `traj` after step `step`, or why there is none.

        Calls are retried; a run whose calls all fail is reported, not fatal to the batch.
        """
        messages = prefix_prompt(traj, step, self.config)
        return ask_parsed(self.model, messages, [risk_tool()], parse_risk)


def judge_at_step(
    judge: PrefixJudge,
    trajs: list[Trajectory],
    step: int,
    workers: int = 4,
    advance: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Judge every labeled run still going at `step`; AUROC / AUPRC of the estimates."""
    going = runs_going(trajs, step)
    if not going:
        raise UserError(f"no labeled run has more than {step} steps")

    def score(traj: Trajectory) -> Asked[float]:
        asked = judge.risk(traj, step)
        if advance is not None:
            advance()
        return asked

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        answers = list(pool.map(score, going))
    failed = {t.id: a.failure for t, a in zip(going, answers, strict=True) if a.failure}
    judged = [(t, a.value) for t, a in zip(going, answers, strict=True) if a.value is not None]
    if not judged:
        first = next(iter(failed.values()))
        raise UserError(f"monitor judge '{judge.model.name}': every call failed, e.g. {first}")
    summary = _summary([t for t, _ in judged], [r for _, r in judged], step, judge.model.name)
    return summary | {"failed_calls": len(failed), "failures": failed}


def runs_going(trajs: list[Trajectory], step: int) -> list[Trajectory]:
    """The runs with a known outcome and more than `step` agent steps (still going at it)."""
    return [t for t in trajs if t.outcome.success is not None and len(t.assistant_indices()) > step]


def _summary(going: list[Trajectory], risks: list[float], step: int, name: str) -> dict:
    failed = np.asarray([not t.outcome.success for t in going], dtype=int)
    both = len(set(failed)) == 2
    return {
        "judge": name,
        "step": step,
        "runs": len(going),
        "failed": int(failed.sum()),
        "auroc": round(float(roc_auc_score(failed, risks)), 4) if both else None,
        "auprc": round(float(average_precision_score(failed, risks)), 4) if both else None,
        "risks": {t.id: round(r, 4) for t, r in zip(going, risks, strict=True)},
    }
