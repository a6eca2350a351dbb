"""User simulators on tau tasks: the scripted user and the LLM user (scripted model)."""

from __future__ import annotations

import pytest

from trajforge.agents import ExpertPolicy, LLMPolicy
from trajforge.agents.base import EpisodeState
from trajforge.agents.user_sim import LLMUser, ScriptedUser, ScriptedUserConfig
from trajforge.envs.base import USER_STOP
from trajforge.envs.tau import TauRetailEnv, bundled_tasks
from trajforge.models.retry import ModelCallFailed
from trajforge.models.scripted import ScriptedModel
from trajforge.rollout.episode import run_episode
from trajforge.rollout.handoff import start_conversation
from trajforge.schema import Message, Source


def _state(env, task, messages) -> EpisodeState:
    return EpisodeState(task=task, messages=messages, tools=env.tools, env=env, step=1)


def test_scripted_user_identifies_confirms_and_stops() -> None:
    task = bundled_tasks("tau-retail")[0]
    env = TauRetailEnv()
    env.reset(task)
    user = ScriptedUser()
    opening = user.opening(task)
    assert task.instruction in opening.text()
    asked = [Message(role="assistant", content="Could you give me your email or zip code?")]
    reply = user.reply(_state(env, task, asked)).text()
    facts = env.user_facts()
    assert facts["email"] in reply and facts["zip code"] in reply
    confirm = [Message(role="assistant", content="Shall I proceed with the exchange?")]
    assert user.reply(_state(env, task, confirm)).text() == "Yes, please go ahead."


def test_scripted_user_gives_up_when_nothing_moves() -> None:
    task = bundled_tasks("tau-retail")[0]
    env = TauRetailEnv()
    env.reset(task)
    user = ScriptedUser(ScriptedUserConfig(max_idle_turns=2))
    chatter = [Message(role="assistant", content="The weather is nice today.")]
    replies = [user.reply(_state(env, task, chatter)).text() for _ in range(4)]
    assert USER_STOP not in replies[0] and USER_STOP in replies[-1]


def test_llm_user_sees_the_conversation_with_roles_swapped() -> None:
    task = bundled_tasks("tau-retail")[1]
    seen: list[list[Message]] = []

    def answer(messages: list[Message]) -> str:
        seen.append(messages)
        return "My email is someone@example.com" if len(seen) == 1 else f"Thanks! {USER_STOP}"

    env = TauRetailEnv()
    user = LLMUser(ScriptedModel([answer], cycle=True))
    start = start_conversation(env, task, user, Source(harness="test"))
    assert start.messages[-1] == Message(role="user", content="My email is someone@example.com")
    model = ScriptedModel([Message(role="assistant", content="Which order?")])
    run = run_episode(env, LLMPolicy(model), task, user=user, trajectory=start)
    assert run.outcome.termination_reason == "user_stop"
    system, greeting, *rest = seen[1]
    assert task.instruction in system.text() and greeting.role == "user"
    assert [m.role for m in rest] == ["assistant", "user"]  # its own words, then the agent's
    assert rest[-1].text() == "Which order?"


def test_expert_with_the_llm_user_solves_a_task() -> None:
    task = bundled_tasks("tau-retail")[2]
    env = TauRetailEnv()

    def answer(messages: list[Message]) -> str:
        return "I need help with my order." if len(messages) <= 2 else USER_STOP

    user = LLMUser(ScriptedModel([answer], cycle=True))
    start = start_conversation(env, task, user, Source(harness="test"))
    run = run_episode(env, ExpertPolicy(), task, user=user, trajectory=start)
    assert run.success


def test_an_llm_user_that_says_nothing_is_a_model_failure_not_a_silent_turn() -> None:
    task = bundled_tasks("tau-retail")[1]
    user = LLMUser(ScriptedModel(["", "  \n", "Hi, I want to return an order."]))
    assert user.opening(task) == Message(role="user", content="Hi, I want to return an order.")
    silent = LLMUser(ScriptedModel([""], cycle=True))
    with pytest.raises(ModelCallFailed, match="unparseable reply"):
        silent.opening(task)
