"""Token-level RL samples from recorded model calls (`trajforge export --format rl`).

A session's calls form one growing token sequence as long as each prompt starts with the
previous prompt plus its completion. Each such run of calls becomes one sample:

- `prompt_ids`: the first call's prompt;
- `completion_ids`: everything after it: the model's completions and, between them, the
  tokens the harness added (tool results, user turns);
- `loss_mask`: 1 on tokens the model sampled, 0 on tokens the harness added;
- `logprobs`: the sampling-time logprob of each model token; null where the mask is 0
  (absent, not a probability of 1);
- `reward`: the trajectory's reward (or 1.0 / 0.0 from its success), None when unknown
  (and for a run a model error ended).

A new sample starts at every drift point: where the proxy's drift audit saw the history
rewritten, compacted or re-tokenized, or where the prompt tokens do not extend the sequence.
A side call (a title or summary request outside the main conversation) is a sample of its
own, after the main conversation's, and does not cut it. Calls without token ids or
logprobs, and failed calls, are left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from trajforge.errors import UserError
from trajforge.export.tables import atomic_path
from trajforge.schema import LLMCall, Trajectory
from trajforge.store import Store, TrajectoryFilter

DRIFT_STATUSES = ("rewritten", "compacted", "retokenized")


@dataclass(frozen=True, slots=True)
class _CallTokens:
    """The token ids and logprobs of a usable call."""

    id: str
    prompt: list[int]
    completion: list[int]
    logprobs: list[float]


@dataclass
class _Sequence:
    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    call_ids: list[str] = field(default_factory=list)

    def extends(self, call: _CallTokens) -> bool:
        known = self.prompt + self.tokens
        return call.prompt[: len(known)] == known

    def add(self, call: _CallTokens) -> None:
        added = call.prompt[len(self.prompt) + len(self.tokens) :]
        self.tokens += added + call.completion
        self.mask += [0] * len(added) + [1] * len(call.completion)
        self.logprobs += [0.0] * len(added) + list(call.logprobs)
        self.call_ids.append(call.id)


def _usable(call: LLMCall) -> _CallTokens | None:
    """The call's tokens, or None for a failed call or one without ids or logprobs."""
    ids, completion, logprobs = call.prompt_token_ids, call.completion_token_ids, call.logprobs
    if call.error is not None or ids is None or completion is None or logprobs is None:
        return None
    if len(logprobs) != len(completion):
        return None
    return _CallTokens(call.id, ids, completion, logprobs)


def _drifted(call: LLMCall) -> bool:
    return (call.extra.get("drift") or {}).get("status") in DRIFT_STATUSES


def token_sequences(traj: Trajectory) -> Iterator[_Sequence]:
    """The trajectory's calls cut into sequences at drift points; side calls last, alone."""
    current: _Sequence | None = None
    side: list[_Sequence] = []
    for call in traj.llm_calls:
        tokens = _usable(call)
        if tokens is None:
            continue
        if call.extra.get("side_call"):
            side.append(_Sequence(prompt=list(tokens.prompt)))
            side[-1].add(tokens)
            continue
        if current is None or _drifted(call) or not current.extends(tokens):
            if current is not None:
                yield current
            current = _Sequence(prompt=list(tokens.prompt))
        current.add(tokens)
    if current is not None:
        yield current
    yield from side


def _reward(traj: Trajectory) -> float | None:
    if traj.outcome.status == "model_error":  # the model was not reached: nothing was judged
        return None
    if traj.outcome.reward is not None:
        return traj.outcome.reward
    if traj.outcome.success is not None:
        return 1.0 if traj.outcome.success else 0.0
    return None


def rl_samples(traj: Trajectory) -> Iterator[dict]:
    """The RL samples of one trajectory."""
    for index, sequence in enumerate(token_sequences(traj)):
        yield {
            "trajectory_id": traj.id,
            "segment": index,
            "prompt_ids": sequence.prompt,
            "completion_ids": sequence.tokens,
            "loss_mask": sequence.mask,
            "logprobs": [
                lp if m else None for lp, m in zip(sequence.logprobs, sequence.mask, strict=True)
            ],
            "reward": _reward(traj),
            "call_ids": sequence.call_ids,
            "model": traj.source.model,
        }


def export_rl(store: Store, flt: TrajectoryFilter, out: Path) -> int:
    """`write_rl` for the stored trajectories the filter selects."""
    return write_rl(store.query(flt), out)


def write_rl(trajs: Iterable[Trajectory], out: Path) -> int:
    """One JSON sample per line; returns the number of trajectories that gave samples."""
    count = seen = 0
    with atomic_path(out) as tmp, tmp.open("wb") as handle:
        for traj in trajs:
            seen += 1
            written = 0
            for sample in rl_samples(traj):
                handle.write(orjson.dumps(sample) + b"\n")
                written += 1
            count += bool(written)
        if not count:
            raise UserError(
                f"no RL samples: none of the {seen} selected trajectories has model calls with "
                "token ids and logprobs; record runs through `trajforge proxy` against a "
                "server that returns them (nothing written)"
            )
    return count
