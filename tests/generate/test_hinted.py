"""Hinted demonstrations: the hint comes from the world, the actions use it, strip removes it."""

from __future__ import annotations

import orjson

from trajforge.agents.expert import ExpertPolicy
from trajforge.agents.household_teacher import ObservableTeacher
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.envs.household.env import SYSTEM_PROMPT
from trajforge.generate.guided import GUIDANCE_HEADER, Guidance, find_leaks, strip
from trajforge.generate.guided.hinted import hinted_run, task_hint
from trajforge.rollout.episode import run_episode


def _hidden_world() -> tuple[int, str, str]:
    """A world whose goal object starts inside a closed receptacle: (seed, object, where)."""
    for seed in range(200):
        env = HouseholdEnv()
        task = task_for(seed, 1)
        env.reset(task)
        world = env.world
        for obj in world.layout.by_type[world.goal.obj_type]:
            where = world.state.place.get(obj)
            if where in world.layout.openable and where != world.goal.target:
                return seed, obj, where
    raise AssertionError("no world with a hidden goal object")


def test_the_hint_says_where_the_goal_object_is_in_this_world() -> None:
    seed, obj, where = _hidden_world()
    hint = task_hint(HouseholdEnv(), task_for(seed, 1))
    assert hint is not None and hint.privileged and hint.source == "privileged"
    assert f"{obj} is in {where} (kitchen)" in hint.text


def test_the_oracle_acts_on_the_hint_it_is_recorded_with_and_strip_removes_it() -> None:
    seed, _, where = _hidden_world()
    task = task_for(seed, 1)
    demo = hinted_run(HouseholdEnv, ExpertPolicy(), task, max_steps=20)
    assert demo is not None and demo.outcome.success
    hint = Guidance.model_validate(demo.metadata["hint"])
    system = demo.messages[0].text()
    assert system.endswith(f"{GUIDANCE_HEADER}\n{hint.text}")
    first = demo.messages[2].tool_calls[0]
    assert orjson.loads(first.arguments) == {"target": where}  # straight to the hidden object
    plain = run_episode(HouseholdEnv(), ObservableTeacher(), task)  # no hint: it searches
    assert len(plain.assistant_indices()) > len(demo.assistant_indices())

    clean = strip(demo, hint, 0, {"source": "privileged"})
    assert clean.messages[0].text() == SYSTEM_PROMPT
    assert not any(hint.text in m.text() or GUIDANCE_HEADER in m.text() for m in clean.messages)
    assert find_leaks(clean, hint, 0) == []


def test_a_failed_run_is_not_a_demonstration() -> None:
    seed, _, _ = _hidden_world()
    assert hinted_run(HouseholdEnv, ExpertPolicy(), task_for(seed, 1), max_steps=1) is None
