"""The household teachers read order strategies as hints, in the words distillation writes."""

from __future__ import annotations

import orjson

from trajforge.agents.base import EpisodeState
from trajforge.agents.household_teacher import ObservableTeacher, hint_ranks, kind
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.schema import StrategyRule
from trajforge.strategies.candidates import comparable
from trajforge.strategies.patterns import render


def _first_target(teacher: ObservableTeacher, task) -> str:
    env = HouseholdEnv()
    messages = env.reset(task)
    state = EpisodeState(task=task, messages=messages, tools=env.tools, env=env, step=0)
    [call] = teacher.act(state).message.tool_calls
    return orjson.loads(call.arguments)["target"]


def test_the_rendered_rule_is_the_hint_the_teacher_reads():
    text = render(StrategyRule(first="go:countertop", then="go:cabinet"))
    assert text == "Before you go to a cabinet, go to a countertop first."
    assert hint_ranks([text, "Call `take` before the first `put`."]) == {
        "countertop": 0,
        "cabinet": 2,
    }


def test_a_hint_changes_which_receptacle_the_teacher_visits_first():
    for seed in range(200):
        task = task_for(seed, 2)
        plain = _first_target(ObservableTeacher(), task)
        if not plain[-1].isdigit():
            continue  # it walks to another room first
        env = HouseholdEnv()
        env.reset(task)
        room, target = env.world.state.room, env.world.goal.target
        here = [r for r in env.world.layout.receptacles_in[room] if r not in (plain, target)]
        other = next((r for r in here if kind(r) != kind(plain) and r[-1].isdigit()), None)
        if other is None or kind(other) in {"sinkbasin", "microwave", "fridge"}:
            continue
        hint = render(StrategyRule(first=f"go:{kind(other)}", then=f"go:{kind(plain)}"))
        hinted = _first_target(ObservableTeacher({task.id: [hint]}), task)
        assert kind(hinted) == kind(other)
        assert _first_target(ObservableTeacher({"another-task": [hint]}), task) == plain
        return
    raise AssertionError("no world with two kinds of receptacle in the starting room")


def test_contrast_pairs_compare_choices_not_progress():
    assert comparable("go:cabinet", "go:countertop")
    assert comparable("find_user_id_by_email", "modify_pending_order_items")
    assert not comparable("take", "go:sinkbasin")
    assert not comparable("open:drawer", "go:drawer")
