"""Advantages of recorded rollouts: the group-normalised outcome on every model token, plus,
for process rewards, each step's fork-based advantage on that step's tokens."""

from __future__ import annotations

from collections.abc import Sequence

from trajforge.train.rl.config import RLConfig
from trajforge.train.rl.grpo import TrainSequence, from_sample, group_advantages
from trajforge.train.rl.process import step_advantages
from trajforge.train.rl.rollouts import Episode


def training_sequences(episodes: Sequence[Episode], config: RLConfig) -> list[TrainSequence]:
    """One sequence per RL sample of every judged episode (a model error is neither a
    failure in its group's baseline nor a sample)."""
    groups: dict[str, list[Episode]] = {}
    for episode in (e for e in episodes if e.judged):
        groups.setdefault(episode.group, []).append(episode)
    outcome = group_advantages({g: [e.reward for e in eps] for g, eps in groups.items()})
    ordered = [e for eps in groups.values() for e in eps]
    process = config.reward == "process"
    steps = step_advantages([e.run for e in ordered], config.max_steps) if process else []
    per_step = dict(zip(map(id, ordered), steps, strict=False))
    sequences = []
    for group, members in groups.items():
        for episode, value in zip(members, outcome[group], strict=True):
            extra = per_step.get(id(episode))
            made = _sequences(episode, group, value, extra, config.process_weight)
            if config.weighting == "episode":
                for seq in made:
                    seq.weight = 1.0 / len(made)
            sequences += made
    if config.weighting == "episode":
        _mean_one(sequences)
    return sequences


def _mean_one(sequences: list[TrainSequence]) -> None:
    """Scale the weights to a mean of 1 (the loss keeps its size)."""
    total = sum(seq.weight for seq in sequences)
    for seq in sequences:
        seq.weight *= len(sequences) / total if total else 1.0


def advantage_signal(episodes: Sequence[Episode], sequences: Sequence[TrainSequence]) -> dict:
    """How much of an iteration can teach: the groups whose rewards are all equal (their
    outcome advantage is 0) and the share of model tokens whose advantage is not 0."""
    rewards: dict[str, set[float]] = {}
    for episode in (e for e in episodes if e.judged):
        rewards.setdefault(episode.group, set()).add(round(episode.reward, 8))
    flat = sum(len(values) == 1 for values in rewards.values())
    model = sum(sum(seq.mask) for seq in sequences)
    moved = sum(sum(1 for m, a in zip(seq.mask, seq.advantages, strict=True) if m and a != 0.0)
                for seq in sequences)  # fmt: skip
    return {
        "groups": len(rewards),
        "zero_variance_groups": round(flat / len(rewards), 4) if rewards else None,
        "advantage_tokens": round(moved / model, 4) if model else None,
    }


def _sequences(
    episode: Episode, group: str, outcome: float, steps: list[float] | None, weight: float
) -> list[TrainSequence]:
    call_step = _call_steps(episode)
    out = []
    for sample in episode.samples:
        seq = from_sample(sample, group, episode.reward)
        run_values = iter(
            [outcome + weight * _at(steps, call_step.get(c)) for c in sample["call_ids"]]
            if steps is not None
            else [outcome] * len(sample["call_ids"])
        )
        seq.advantages = _spread(seq.mask, run_values)
        out.append(seq)
    return out


def _call_steps(episode: Episode) -> dict[str, int]:
    """Recorded call id -> the agent step it produced (calls are made one per step)."""
    calls = episode.recorded.llm_calls if episode.recorded is not None else []
    return {call.id: step for step, call in enumerate(calls)}


def _at(values: list[float] | None, index: int | None) -> float:
    if values is None or index is None or index >= len(values):
        return 0.0
    return values[index]


def _spread(mask: list[int], run_values) -> list[float]:
    """Each maximal run of model tokens (one call's completion) gets the next value."""
    out, current, inside = [], 0.0, False
    for flag in mask:
        if flag and not inside:
            current = next(run_values, 0.0)
        inside = bool(flag)
        out.append(current if flag else 0.0)
    return out
