"""Per-step features for the trained diagnoser: what any log shows about each agent step.

Candidates are the agent's own messages: assistant messages, and in multi-agent logs every
named speaker's message except the code-execution terminal. Features are generic (position,
tool calls and their results, repetition, speakers, text shape); none of them encodes a
rule chosen on a labelled dataset, so a model trained on one log format can be scored
honestly on another. Bump `FEATURE_VERSION` whenever a feature changes.
"""

from __future__ import annotations

import math

import numpy as np

from trajforge.diagnose.evidence import (
    calls_with_results,
    canonical_arguments,
    gold_actions,
    is_error_text,
    is_multi_agent,
    is_write,
    speaker,
)
from trajforge.schema import Message, Trajectory

FEATURE_VERSION = "steps-v1"
FEATURES = (
    "relative_position",
    "candidate_rank",
    "is_first",
    "is_last",
    "log_index",
    "log_length",
    "has_calls",
    "writes",
    "result_error",
    "next_is_error",
    "errors_before",
    "errors_before_share",
    "repeats_call",
    "repeats_before",
    "new_tool",
    "writes_before",
    "log_text_length",
    "has_code",
    "speaker_share",
    "speaker_first",
    "speaker_changes",
    "gold_known",
    "gold_mismatch",
    "gold_writes_left",
    "multi_agent",
    "next_returns",
    "next_reuses_arguments",
    "detour",
    "detours_before",
    "detours_after",
    "detours_before_share",
    "first_detour",
    "second_detour",
    "third_detour",
)
TERMINALS = {"computer_terminal", "terminal", "executor", "code_executor"}


def is_terminal(message: Message) -> bool:
    return message.role == "tool" or (message.name or "").lower() in TERMINALS


def candidates(traj: Trajectory) -> list[int]:
    """The message indices a diagnosis may blame (see module docstring)."""
    if is_multi_agent(traj):
        return [
            i
            for i, m in enumerate(traj.messages)
            if m.role != "system" and not is_terminal(m) and (m.name or m.role == "assistant")
        ]
    return traj.assistant_indices()


def _call_results(traj: Trajectory) -> dict[int, list[tuple[str, bool]]]:
    """Per assistant message: (call key, result was an error) for each of its calls."""
    out: dict[int, list[tuple[str, bool]]] = {}
    for index, call, result in calls_with_results(traj):
        text = traj.messages[result].text() if result is not None else ""
        key = f"{call.name}:{canonical_arguments(call.arguments)}"
        out.setdefault(index, []).append((key, is_error_text(text)))
    return out


def _gold_writes(traj: Trajectory) -> list[str] | None:
    gold = gold_actions(traj)
    if gold is None:
        return None
    return [f"{a['name']}:{canonical_arguments(a['kwargs'])}" for a in gold if is_write(a["name"])]


_CACHE: dict[tuple, tuple[list[int], np.ndarray]] = {}
_CACHE_SIZE = 4096


def step_features(traj: Trajectory) -> tuple[list[int], np.ndarray]:
    """(candidate indices, one feature row per candidate). Cached by trajectory id (a
    content hash), since fitting per fold reads the same runs many times."""
    text_size = sum(len(m.text()) for m in traj.messages)
    gold_size = len(str(traj.task.gold))  # the gold features read the task's gold actions
    key = (traj.id, len(traj.messages), text_size, gold_size)
    if traj.id and key in _CACHE:
        return _CACHE[key]
    computed = _compute(traj)
    if traj.id:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = computed
    return computed


def _compute(traj: Trajectory) -> tuple[list[int], np.ndarray]:
    steps = candidates(traj)
    calls = _call_results(traj)
    gold = _gold_writes(traj)
    n = len(traj.messages)
    speakers = [speaker(traj.messages[i]).lower() for i in steps]
    seen_calls: dict[str, int] = {}
    seen_tools: set[str] = set()
    seen_speakers: set[str] = set()
    errors: float = 0
    writes = 0
    remaining = list(gold or [])
    rows = []
    for rank, index in enumerate(steps):
        message = traj.messages[index]
        mine = calls.get(index, [])
        keys = [key for key, _ in mine]
        write_keys = [key for key in keys if is_write(key.split(":", 1)[0])]
        nxt = traj.messages[index + 1] if index + 1 < n else None
        mismatch = bool(gold is not None and any(k not in remaining for k in write_keys))
        rows.append(
            [
                index / max(1, n - 1),
                rank / max(1, len(steps) - 1),
                float(rank == 0),
                float(rank == len(steps) - 1),
                math.log1p(index),
                math.log1p(n),
                float(bool(mine)),
                float(len(write_keys)),
                float(any(err for _, err in mine)),
                float(nxt is not None and is_terminal(nxt) and is_error_text(nxt.text())),
                math.log1p(errors),
                errors / max(1, rank),
                float(any(key in seen_calls for key in keys)),
                math.log1p(sum(seen_calls.get(key, 0) for key in keys)),
                float(any(key.split(":", 1)[0] not in seen_tools for key in keys)),
                math.log1p(writes),
                math.log1p(len(message.text())),
                float("```" in message.text()),
                speakers.count(speakers[rank]) / len(steps),
                float(speakers[rank] not in seen_speakers),
                float(rank > 0 and speakers[rank] != speakers[rank - 1]),
                float(gold is not None),
                float(mismatch),
                float(len(remaining)),
                float(is_multi_agent(traj)),
            ]
        )
        errors += sum(err for _, err in mine) + rows[-1][9]
        writes += len(write_keys)
        for key in keys:
            seen_calls[key] = seen_calls.get(key, 0) + 1
            seen_tools.add(key.split(":", 1)[0])
        seen_speakers.add(speakers[rank])
        remaining = [k for k in remaining if k not in write_keys]
    _add_detours(rows, [[key for key, _ in calls.get(i, [])] for i in steps])
    return steps, np.asarray(rows, dtype=float).reshape(len(steps), len(FEATURES))


def _arguments(key: str) -> set[str]:
    """The argument values of a call key (`name:{json}`), as strings."""
    body = key.split(":", 1)[1] if ":" in key else ""
    return {part.strip(' "{}') for part in body.split(",") if ":" in part}


def _add_detours(rows: list[list[float]], keys: list[list[str]]) -> None:
    """Detours, read with hindsight from the log: a step whose next call returns to an
    earlier call (walking back) or reuses its arguments with another tool (put back what was
    taken), a repeated call, or an error. Adds the step's flag and the counts around it."""
    flags = []
    for rank, mine in enumerate(keys):
        following = keys[rank + 1] if rank + 1 < len(keys) else []
        earlier = {key for step in keys[:rank] for key in step}
        returns = any(key in earlier for key in following)
        names = {key.split(":", 1)[0] for key in mine}
        mine_args = set().union(*(_arguments(key) for key in mine)) if mine else set()
        reuses = any(
            key.split(":", 1)[0] not in names and _arguments(key) & mine_args for key in following
        )
        row = rows[rank]
        detour = returns or reuses or row[12] > 0 or row[8] > 0
        row.extend([float(returns), float(reuses), float(detour)])
        flags.append(detour)
    for rank, row in enumerate(rows):
        before = sum(flags[:rank])
        row.extend([float(before), float(sum(flags[rank + 1 :])), before / max(1, rank)])
        row.extend(float(flags[rank] and before == k) for k in range(3))
