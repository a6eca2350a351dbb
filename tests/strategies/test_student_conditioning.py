"""Strategies as conditioning text: the training rows carry them, and a trained student's
prompt holds them exactly when its evaluation episode is given them."""

from __future__ import annotations

from pathlib import Path

from trajforge.agents.household_teacher import ObservableTeacher
from trajforge.agents.llm import STRATEGIES_HEADER
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.models.openai_compat import message_to_openai
from trajforge.rollout.episode import run_episode
from trajforge.serve.student import Student
from trajforge.train.conditioned import conditioned_rows, conditioned_starts
from trajforge.train.rows import sequences
from trajforge.train.sft import SFTConfig, train_sft

RULE = "Before you go to a drawer, go to a sidetable first."
OTHER = "Call `clean` before the first `put`."


def _system(row: dict) -> str:
    first = row["messages"][0]
    assert first["role"] == "system"
    return first["content"]


def test_rows_carry_the_strategies_and_the_prompt_holds_them_only_when_given(
    tmp_path: Path,
) -> None:
    tasks = [task_for(seed, 1) for seed in range(6)]
    hints = {task.id: [RULE, OTHER] for task in tasks}
    runs = [run_episode(HouseholdEnv(), ObservableTeacher(hints), task) for task in tasks]
    rows = conditioned_rows(runs, hints)
    plain = conditioned_rows(runs, {})
    assert rows and len(rows) == len(plain) == sum(bool(r.outcome.success) for r in runs)
    for row in rows:
        assert f"{STRATEGIES_HEADER}\n- {RULE}\n- {OTHER}" in _system(row)
    assert not any(STRATEGIES_HEADER in _system(row) for row in plain)

    config = SFTConfig(steps=2, batch_size=2, hidden=16, layers=1, heads=2, warmup=0, threads=1)
    student = Student(train_sft(sequences(rows), tmp_path / "student", config))
    held_out = [task_for(1_000_000 + seed, 1) for seed in range(2)]
    given = {task.id: [RULE] for task in held_out}

    def prompt_words(strategies: dict[str, list[str]]) -> list[str]:
        (_, traj), *_ = conditioned_starts(HouseholdEnv, held_out, strategies)
        messages = [message_to_openai(m) for m in traj.messages]
        return student.codec.pieces(student.codec.prompt(messages, traj.tools))

    with_rule = prompt_words(given)
    assert with_rule[: with_rule.index("<|end|>")] == [
        "<|system|>", "-", "Before", "you", "go", "to", "a", "drawer", ",", "go", "to", "a",
        "sidetable", "first", ".",
    ]  # fmt: skip
    assert "<|system|>" not in prompt_words({})
