"""Training data: teachers, recovery views with the replaced action masked, held-out seeds."""

from __future__ import annotations

import pytest

from trajforge.agents import POLICIES
from trajforge.agents.base import EpisodeState
from trajforge.agents.household_teacher import NoisyObservableTeacher, ObservableTeacher
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.errors import UserError
from trajforge.generate.recovery import first_labelled_error, household_rows, recover
from trajforge.rollout.episode import Limits, run_episode
from trajforge.serve.codec import CompactCodec
from trajforge.train.evaluate import (
    HELD_OUT_START,
    check_held_out,
    check_training_tasks,
    held_out_tasks,
)
from trajforge.train.rows import sequences


def test_observable_teacher_solves_worlds_without_looking_at_the_environment() -> None:
    assert POLICIES.get("household-teacher") is ObservableTeacher
    for difficulty, seeds in ((1, 40), (2, 40), (3, 15)):
        for seed in range(seeds):
            env = HouseholdEnv()
            task = task_for(seed, difficulty)
            run = run_episode(env, ObservableTeacher(), task, limits=Limits(max_steps=80))
            assert run.outcome.success, (difficulty, seed)
            blind = EpisodeState(task=run.task, messages=run.messages[:2], tools=[], env=None,
                                 step=0)  # fmt: skip
            first = ObservableTeacher().act(blind).message.tool_calls[0]
            assert first.arguments == run.messages[2].tool_calls[0].arguments


def _noisy_run_with_error(seed: int):
    run = run_episode(HouseholdEnv(), NoisyObservableTeacher(seed=seed, error_rate=0.5),
                      task_for(seed, 1))  # fmt: skip
    return run, first_labelled_error(run)


def test_recovery_view_masks_the_replaced_action_and_teaches_the_continuation() -> None:
    run, error = next((r, e) for r, e in map(_noisy_run_with_error, range(50)) if e is not None)
    child = recover(HouseholdEnv(), run, error, ObservableTeacher(), max_steps=20)
    assert child.outcome.success
    assert child.messages[error].model_dump() == run.messages[error].model_dump()
    rows = household_rows(child, masked=[error])
    assert {r["form"] for r in rows} == {"prompt-completion"}
    learned = [i for r in rows for i in r["learned"]]
    assert error not in learned
    assert learned == [i for i in child.assistant_indices() if i != error]
    assert all(r["completion"] == [r["completion"][0]] for r in rows)
    assert all(isinstance(c["function"]["arguments"], str)
               for r in rows for m in r["prompt"] + r["completion"]
               for c in m.get("tool_calls") or [])  # fmt: skip
    [(messages, tools)] = sequences(rows)  # one run: the rows pack into one sequence
    codec = CompactCodec.build([(messages, tools)])
    ids, mask = codec.encode(messages, tools)
    wrong = [codec.vocab["<|assistant|>"], *codec.completion_ids(messages[error], tools)]
    start = next(i for i in range(len(ids)) if ids[i : i + len(wrong)] == wrong)
    assert not any(mask[start : start + len(wrong)])
    assert any(mask[start + len(wrong) :])


def test_held_out_seeds_never_overlap_training_seeds() -> None:
    tests = held_out_tasks(HouseholdEnv(), 20, 1)
    assert all(t.data["world_seed"] >= HELD_OUT_START for t in tests)
    check_held_out([t.id for t in tests], [task_for(s, 1).id for s in range(400)])
    with pytest.raises(UserError, match="used to make the training data"):
        check_held_out([t.id for t in tests], [tests[3].id])
    with pytest.raises(UserError, match="held-out worlds"):
        check_training_tasks(["household-d1-5", tests[0].id])


def test_eval_refuses_a_checkpoint_trained_on_a_test_world(student_dir, tmp_path) -> None:
    import shutil

    import orjson

    from trajforge.train.evaluate import EvalConfig, evaluate_checkpoint

    leaky = tmp_path / "leaky"
    shutil.copytree(student_dir, leaky)
    manifest = orjson.loads((leaky / "trajforge.json").read_bytes())
    manifest["train_tasks"].append(f"household-d1-{HELD_OUT_START + 1}")
    (leaky / "trajforge.json").write_bytes(orjson.dumps(manifest))
    with pytest.raises(UserError, match="used to make the training data"):
        evaluate_checkpoint(leaky, EvalConfig(tasks=5, recovery=0))
