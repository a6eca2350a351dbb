"""The tau oracle: distance, expert actions, distractors, and the bundled task set."""

from __future__ import annotations

import random

import pytest

from trajforge.agents import ExpertPolicy, NoisyExpertPolicy
from trajforge.agents.user_sim import ScriptedUser
from trajforge.envs.tau import TauAirlineEnv, TauRetailEnv, TauTaskSet, bundled_tasks
from trajforge.rollout.episode import run_episode
from trajforge.rollout.handoff import start_conversation
from trajforge.schema import Message, Source, Task, ToolCall


def _expert_run(env, task: Task):
    user = ScriptedUser()
    start = start_conversation(env, task, user, Source(harness="test"))
    return run_episode(env, ExpertPolicy(), task, user=user, trajectory=start)


@pytest.mark.parametrize("env_class", [TauRetailEnv, TauAirlineEnv])
def test_the_expert_solves_every_bundled_task(env_class) -> None:
    env = env_class()
    tasks = bundled_tasks(env.name)
    failures = []
    for task in tasks:
        run = _expert_run(env, task)
        if not run.success:
            failures.append((task.id, run.outcome.details))
    assert len(tasks) == {"tau-retail": 100, "tau-airline": 50}[env.name]
    assert failures == []


def test_distance_counts_missing_gold_writes_and_required_outputs() -> None:
    task = next(t for t in bundled_tasks("tau-retail") if t.gold["outputs"])
    env = TauRetailEnv()
    run = _expert_run(env, task)
    assert run.success
    env.reset(task)
    messages = [Message(role="system", content="")]
    env.bind_conversation(messages)
    writes = len(env.gold.effective)
    assert env.distance() == writes + 1  # the output is still unsaid
    for action in env.gold.actions:
        env.step(ToolCall(id="x", name=action.name, arguments=action.arguments))
    assert env.distance() == 1
    messages.append(Message(role="assistant", content=f"It is {task.gold['outputs'][0]}."))
    assert env.distance() == 0


def test_gold_writes_done_in_another_order_still_count() -> None:
    task = next(
        t
        for t in bundled_tasks("tau-airline")
        if [a["name"] for a in t.gold["actions"]].count("cancel_reservation") >= 2
    )
    env = TauAirlineEnv()
    env.reset(task)
    cancels = [a for a in env.gold.actions if a.name == "cancel_reservation"]
    total = env.distance()
    env.step(ToolCall(id="x", name="cancel_reservation", arguments=cancels[-1].arguments))
    assert env.distance() == total - 1
    action = env.expert_action()
    assert isinstance(action, ToolCall) and action.arguments != cancels[-1].arguments


def test_a_wrong_write_makes_success_unreachable() -> None:
    task = next(t for t in bundled_tasks("tau-retail") if len(t.gold["actions"]) > 2)
    env = TauRetailEnv()
    env.reset(task)
    rng = random.Random(1)
    wrong = None
    while wrong is None or wrong.name in ("get_user_details", "get_order_details"):
        wrong = env.distractor_action(rng)
    gold_calls = {(a.name, a.arguments) for a in env.gold.actions}
    assert (wrong.name, wrong.arguments) not in gold_calls
    result = env.step(wrong)
    assert not result.error, result.content
    assert env.distance() is None
    assert isinstance(env.expert_action(), Message)
    assert not env.evaluate().success


def test_noisy_expert_labels_its_mistakes_with_source_oracle() -> None:
    env = TauAirlineEnv()
    task = bundled_tasks("tau-airline")[0]
    user = ScriptedUser()
    start = start_conversation(env, task, user, Source(harness="test"))
    run = run_episode(
        env, NoisyExpertPolicy(seed=2, error_rate=1.0), task, user=user, trajectory=start
    )
    assert run.labels and all(label.source == "oracle" for label in run.labels)
    labelled = run.messages[run.labels[0].message_index]
    assert labelled.role == "assistant" and labelled.tool_calls
    assert not run.success


def test_task_set_lists_the_bundled_tasks() -> None:
    retail = TauTaskSet("tau-retail")
    assert len(retail.tasks()) == 100
    assert [t.id for t in retail.tasks(3)] == ["0", "1", "2"]
    shuffled = retail.tasks(5, seed=7)
    assert len(shuffled) == 5 and shuffled != retail.tasks(5)
    assert all(t.environment == "tau-airline" for t in TauAirlineEnv().tasks())
    assert all(t.gold["actions"] is not None and t.data["user_id"] for t in retail.tasks())


def test_gold_writes_in_a_blocking_order_make_success_unreachable() -> None:
    """Changing an order's items first leaves it 'pending (item modified)': the gold's
    address change for the same order can no longer follow."""
    task = next(t for t in bundled_tasks("tau-retail") if _address_then_items_on_one_order(t))
    env = TauRetailEnv()
    env.reset(task)
    items = next(a for a in env.gold.actions if a.name == "modify_pending_order_items")
    assert not env.step(ToolCall(id="x", name=items.name, arguments=items.arguments)).error
    assert env.distance() is None
    assert isinstance(env.expert_action(), Message)


def _address_then_items_on_one_order(task: Task) -> bool:
    addressed = set()
    for action in task.gold["actions"]:
        order = action["kwargs"].get("order_id")
        if action["name"] == "modify_pending_order_address":
            addressed.add(order)
        elif action["name"] == "modify_pending_order_items" and order in addressed:
            return True
    return False
