"""The household environment: generation, rules, oracle, snapshots, distractors."""

from __future__ import annotations

import random
from collections import deque

import orjson
import pytest

from trajforge.agents import ExpertPolicy
from trajforge.envs import ENVIRONMENTS, Environment, Oracle
from trajforge.envs.household import HouseholdEnv
from trajforge.errors import UserError
from trajforge.rollout import Limits, run_episode
from trajforge.schema import ToolCall


def call(name: str, **args: str) -> ToolCall:
    return ToolCall(id="c", name=name, arguments=orjson.dumps(args).decode())


def test_registered_and_implements_the_protocols() -> None:
    env = ENVIRONMENTS.get("household")()
    assert isinstance(env, Environment) and isinstance(env, Oracle)
    names = {tool["function"]["name"] for tool in env.tools}
    assert {"go", "open", "close", "take", "put", "clean", "heat", "cool"} <= names
    assert {"examine", "look", "inventory"} <= names


def test_generation_is_seeded_and_ids_rebuild_tasks() -> None:
    env = HouseholdEnv()
    tasks = env.tasks(9)
    assert tasks == HouseholdEnv().tasks(9)
    assert tasks != env.tasks(9, seed=1)
    assert [t.data["difficulty"] for t in tasks] == [1, 2, 3] * 3
    assert all(env.task_by_id(t.id) == t for t in tasks)
    assert HouseholdEnv(difficulty=2).tasks(3)[2].data["difficulty"] == 2
    with pytest.raises(UserError, match="household-d<1-3>-<seed>"):
        env.task_by_id("kitchen-7")


def test_difficulty_levels_grow() -> None:
    env = HouseholdEnv()
    lengths = {d: [] for d in (1, 2, 3)}
    for task in env.tasks(30):
        lengths[task.data["difficulty"]].append(len(task.gold))
    means = [sum(v) / len(v) for v in lengths.values()]
    assert means[0] < means[1] < means[2]
    instructions = [t.instruction for t in env.tasks(30) if t.data["difficulty"] == 3]
    assert all(text.startswith("put 2 ") for text in instructions)


def test_expert_solves_every_task_in_exactly_distance_steps() -> None:
    env = HouseholdEnv()
    for task in env.tasks(30):
        env.reset(task)
        start = env.distance()
        traj = run_episode(env, ExpertPolicy(), task, limits=Limits(max_steps=80))
        assert traj.outcome.success, task.id
        assert len(traj.assistant_indices()) == start == len(task.gold)


def test_distance_drops_by_one_per_expert_action() -> None:
    env = HouseholdEnv()
    env.reset(env.tasks(6)[5])
    while (remaining := env.distance()) > 0:
        env.step(env.expert_action())
        assert env.distance() == remaining - 1
    assert env.evaluate().success and env.expert_action() is None


def test_rules_reject_impossible_actions_with_an_error() -> None:
    env = HouseholdEnv()
    env.reset(env.tasks(1)[0])
    assert env.step(call("take", object="nothing 9")).error
    assert env.step(call("go", target="moon")).error
    assert env.step(call("heat", object="mug 1")).error
    assert env.step(call("put")).error
    assert env.step(ToolCall(id="c", name="look", arguments="{bad")).error
    assert env.step(call("fly")).error
    assert "not carrying" in env.step(call("inventory")).content


def test_closed_receptacles_must_be_opened() -> None:
    env = HouseholdEnv(difficulty=3)
    task = env.tasks(1)[0]
    env.reset(task)
    state = env.world.state
    closed = next(r for r in env.world.layout.openable if env.world.layout.room_of[r] == state.room)
    env.step(call("go", target=closed))
    assert "closed" in env.step(call("look")).content
    inside = state.contents[closed]
    if inside:
        assert env.step(call("take", object=inside[0])).error
    assert not env.step(call("open", target=closed)).error
    if inside:
        assert not env.step(call("take", object=inside[0])).error


def test_snapshot_restore_returns_to_the_same_state() -> None:
    env = HouseholdEnv()
    env.reset(env.tasks(3)[2])
    for _ in range(3):
        env.step(env.expert_action())
    saved = env.snapshot()
    before = (env.distance(), env.step(call("look")).content)
    for _ in range(4):
        env.step(env.expert_action())
    env.restore(saved)
    assert (env.distance(), env.step(call("look")).content) == before


def test_distractor_is_valid_and_differs_from_the_expert() -> None:
    env = HouseholdEnv()
    env.reset(env.tasks(3)[2])
    rng = random.Random(0)
    while (expert := env.expert_action()) is not None:
        wrong = env.distractor_action(rng)
        assert (wrong.name, wrong.arguments) != (expert.name, expert.arguments)
        saved = env.snapshot()
        assert not env.step(wrong).error
        env.restore(saved)
        env.step(expert)


def _all_actions(env: HouseholdEnv) -> list[ToolCall]:
    layout, state = env.world.layout, env.world.state
    actions = [call("go", target=t) for t in [*layout.room_of, *layout.rooms]]
    actions += [call(n, target=r) for r in layout.openable for n in ("open", "close")]
    actions += [call("take", object=o) for o in layout.obj_type]
    if state.holding:
        actions += [call("put", object=state.holding, receptacle=r) for r in layout.room_of]
        actions += [call(n, object=state.holding) for n in ("clean", "heat", "cool")]
    return actions


def _key(env: HouseholdEnv) -> tuple:
    s = env.world.state
    return (s.room, s.at, s.holding, tuple(sorted(s.place.items(), key=str)),
            frozenset(s.opened), tuple(sorted(s.props.items())))  # fmt: skip


def _brute_force_distance(env: HouseholdEnv, limit: int) -> int | None:
    queue = deque([(env.snapshot(), 0)])
    seen = {_key(env)}
    while queue:
        state, depth = queue.popleft()
        env.restore(state)
        if env.evaluate().success:
            return depth
        if depth == limit:
            continue
        for action in _all_actions(env):
            env.restore(state)
            if env.step(action).error or _key(env) in seen:
                continue
            seen.add(_key(env))
            queue.append((env.snapshot(), depth + 1))
    return None


@pytest.mark.parametrize("index", [0, 3, 6])
def test_oracle_distance_equals_exhaustive_search(index: int) -> None:
    env = HouseholdEnv(difficulty=1)
    env.reset(env.tasks(8)[index])
    planned = env.distance()
    assert _brute_force_distance(env, planned) == planned
