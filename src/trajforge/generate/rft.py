"""Rejection-sampling fine-tuning data: keep verified successes, drop near-duplicates.

From K sampled rollouts per task, a trajectory is kept when

1. it succeeded, and the success is verified again by replaying its executed tool calls in
   a fresh environment (`envs.replay.replay_to`) and judging the final state;
2. its action sequence is not a near-duplicate of one already kept for the same task
   (difflib similarity of the action lists at least `similarity`; 1.0 keeps all but exact
   repeats).

The output is `train.messages.jsonl` and `train.prompt-completion.jsonl` (one file per
form, as trainers read one form per dataset) in trajforge's training-row schema
(`trajforge.generate.rows`): a kept run with no labelled mistake is one `messages` row
(every assistant turn learned); a kept run whose policy made labelled mistakes on the way
(a noisy policy that still succeeded) becomes one prompt-completion row per correct turn,
the mistakes staying in the prompts as context only. Plus `yield.json` with sampled /
successes / verified / kept per task and the row counts. A rollout a model error
ended is not judged: it is counted (`model_errors`) and left out of the yield. With
`pairs`, also `train.preference.jsonl`: where a kept run and a sample judged failed of the
same task first part (`generate.pairs.sibling_pairs`), the kept run's action is chosen over
the failed one's.

Actions are compared as the environment reads them: tool calls, or for an environment of
text actions (swe-bench: a mini-swe-agent bash block) the command in the assistant's text.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, Field

from trajforge.envs import make_env
from trajforge.envs.base import Environment, TextActions
from trajforge.envs.replay import replay_to
from trajforge.generate.pairs import sibling_pairs
from trajforge.generate.rows import row_counts, run_rows, write_forms
from trajforge.models.retry import model_failure, require_an_answer
from trajforge.schema import Trajectory

DATA_FILE = "train.jsonl"
YIELD_FILE = "yield.json"


class RFTConfig(BaseModel):
    """How samples are filtered."""

    similarity: float = Field(
        default=0.9, ge=0.0, le=1.0, description="Drop a sample this similar to a kept one."
    )
    verify: bool = Field(default=True, description="Re-check each success by replay.")
    pairs: bool = Field(
        default=False,
        description="Also write preference pairs: where a kept run and a sample the "
        "environment judged failed (same task) first part, the kept run's action is chosen.",
    )


class TaskYield(BaseModel):
    task: str = Field(description="Task id.")
    sampled: int = Field(description="Rollouts sampled.")
    successes: int = Field(description="Rollouts the environment judged successful.")
    verified: int = Field(description="Successes confirmed by replay.")
    kept: int = Field(description="Verified successes left after deduplication.")
    model_errors: int = Field(
        default=0, description="Rollouts a model error ended (not judged, out of the yield)."
    )


def actions(traj: Trajectory, env: Environment | None = None) -> list[str]:
    """The action sequence: tool calls with canonical arguments, actions written in the
    text for an environment that reads them (`TextActions`: a mini-swe-agent bash block),
    and final answers."""
    sequence = []
    for message in traj.messages:
        if message.role != "assistant":
            continue
        calls = list(message.tool_calls or [])
        if not calls and isinstance(env, TextActions):
            calls = [call] if (call := env.text_action(message)) is not None else []
        for call in calls:
            sequence.append(f"{call.name}({_canonical(call.arguments)})")
        if not calls:
            sequence.append(f"say({message.text()[:200]})")
    return sequence


def _canonical(arguments: str) -> str:
    try:
        return orjson.dumps(orjson.loads(arguments), option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONDecodeError:
        return arguments


def verify_by_replay(traj: Trajectory, env_name: str) -> bool:
    """Replay the executed tool calls in a fresh environment; True when it ends in success."""
    env = make_env(env_name)
    try:
        replay_to(env, traj, len(traj.messages))
        env.bind_conversation(traj.messages)
        return bool(env.evaluate().success)
    finally:
        env.close()


def _is_near_duplicate(candidate: list[str], kept: list[list[str]], threshold: float) -> bool:
    for other in kept:
        if candidate == other:
            return True
        if threshold < 1.0 and difflib.SequenceMatcher(None, candidate, other).ratio() >= threshold:
            return True
    return False


def select(
    trajs: list[Trajectory], env_name: str, config: RFTConfig | None = None
) -> tuple[list[Trajectory], list[TaskYield]]:
    """Kept trajectories (task order, then sample order) and the yield of each task."""
    config = config or RFTConfig()
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for traj in sorted(trajs, key=lambda t: t.metadata.get("sample", 0)):
        by_task[traj.task.id].append(traj)
    reader = make_env(env_name)  # reads actions written in text; never reset
    try:
        picked = [
            _select_task(task_id, samples, env_name, config, reader)
            for task_id, samples in by_task.items()
        ]
    finally:
        reader.close()
    return [traj for chosen, _ in picked for traj in chosen], [report for _, report in picked]


def _select_task(
    task_id: str, samples: list[Trajectory], env_name: str, config: RFTConfig, reader: Environment
) -> tuple[list[Trajectory], TaskYield]:
    wins = [t for t in samples if t.outcome.success]
    verified = [t for t in wins if not config.verify or verify_by_replay(t, env_name)]
    chosen: list[Trajectory] = []
    for traj in verified:
        earlier = [actions(k, reader) for k in chosen]
        if not _is_near_duplicate(actions(traj, reader), earlier, config.similarity):
            chosen.append(traj)
    errors = sum(1 for t in samples if t.outcome.status == "model_error")
    return chosen, TaskYield(
        task=task_id, sampled=len(samples), successes=len(wins), verified=len(verified),
        kept=len(chosen), model_errors=errors,
    )  # fmt: skip


def judged_failures(trajs: list[Trajectory]) -> list[Trajectory]:
    """The samples the environment judged failed (not those a model error ended)."""
    return [t for t in trajs if t.outcome.success is False and t.outcome.status != "model_error"]


class RFTResult(BaseModel):
    """What an RFT selection wrote and kept."""

    data: list[Path] = Field(description="The training-row files written, one per form.")
    report: list[TaskYield] = Field(description="Yield per task.")
    counts: dict[str, int] = Field(description="Rows, learned and masked turns (`row_counts`).")

    def summary(self) -> dict[str, Any]:
        """Output path, totals and the per-task yield, as the command reports them."""
        tasks = [r.model_dump() for r in self.report]
        out = [str(p) for p in self.data]
        return {"out": out, **totals(self.report), **self.counts, "tasks": tasks}


def write_sft(
    kept: list[Trajectory],
    report: list[TaskYield],
    out: Path,
    pairs: list[dict[str, Any]] | None = None,
) -> RFTResult:
    """Write the training rows of the kept runs (and `pairs`, preference rows) into `out`,
    a file per form, and `yield.json`."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [row for traj in kept for row in run_rows(traj, "rft")] + list(pairs or [])
    files = write_forms(out / DATA_FILE, rows)
    summary = {"tasks": [r.model_dump() for r in report], **totals(report), **row_counts(rows)}
    summary["files"] = {form: path.name for form, path in files.items()}
    (out / YIELD_FILE).write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    return RFTResult(data=list(files.values()), report=report, counts=row_counts(rows))


def totals(report: list[TaskYield]) -> dict[str, Any]:
    sampled = sum(r.sampled for r in report)
    errors = sum(r.model_errors for r in report)
    kept = sum(r.kept for r in report)
    judged = sampled - errors
    return {
        "sampled": sampled,
        "successes": sum(r.successes for r in report),
        "verified": sum(r.verified for r in report),
        "kept": kept,
        "model_errors": errors,
        "yield": round(kept / judged, 4) if judged else 0.0,
    }


def rft_dataset(
    trajs: list[Trajectory], env_name: str, out: Path, config: RFTConfig | None = None
) -> RFTResult:
    """Keep the verified, non-duplicate successes of sampled runs and write them as SFT (not
    when every sample ended because the model could not be reached: that is an error)."""
    config = config or RFTConfig()
    require_an_answer([model_failure(t) for t in trajs], "sampled rollout", "nothing was kept")
    kept, report = select(trajs, env_name, config)
    pairs = sibling_pairs(kept + judged_failures(trajs)) if config.pairs else []
    return write_sft(kept, report, out, pairs)
