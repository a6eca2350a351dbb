"""The text convention for tool calls (SmolLM2's template has no tool support)."""

from __future__ import annotations

from trajforge.envs.household.tools import TOOLS
from trajforge.models import tool_text


def test_a_written_call_reads_back_as_the_same_call() -> None:
    call = {"name": "put", "arguments": '{"object": "apple 1", "receptacle": "fridge 1"}'}
    text = tool_text.assistant_text({"role": "assistant", "content": "Done.", "tool_calls": [call]})
    parsed = tool_text.parse_reply(text, TOOLS)
    assert parsed.content == "Done."
    assert parsed.calls == [
        {"name": "put", "arguments": {"object": "apple 1", "receptacle": "fridge 1"}}
    ]
    assert parsed.errors == []


def test_malformed_calls_are_listed_and_never_calls() -> None:
    text = (
        '<tool_call>{"name": "go", "arguments": {"target": "sink 1"}}</tool_call>\n'
        "<tool_call>{name: go}</tool_call>\n"
        '<tool_call>{"name": "fly", "arguments": {}}</tool_call>\n'
        '<tool_call>{"name": "go", "arguments": "sink"}</tool_call>\n'
        '<tool_call>{"name": "look", "argu'
    )
    parsed = tool_text.parse_reply(text, TOOLS)
    assert parsed.calls == [{"name": "go", "arguments": {"target": "sink 1"}}]
    problems = [e.split(": ")[1] for e in parsed.errors]
    assert problems == [
        "not JSON",
        "unknown tool 'fly'",
        '"arguments" is not an object',
        "not closed",
    ]
    assert parsed.content is None


def test_tools_go_into_the_system_prompt_and_tool_results_stay_tool_messages() -> None:
    messages = [
        {"role": "user", "content": "Put the apple away."},
        {"role": "assistant", "content": None, "tool_calls": [{"name": "look", "arguments": {}}]},
        {"role": "tool", "content": "You are in the kitchen.", "tool_call_id": "c1"},
    ]
    plain = tool_text.render_messages(messages, TOOLS)
    assert [m["role"] for m in plain] == ["system", "user", "assistant", "tool"]
    assert plain[0]["content"].count("\n{") == len(TOOLS)
    assert plain[2]["content"] == '<tool_call>{"name":"look","arguments":{}}</tool_call>'
    with_system = tool_text.render_messages([{"role": "system", "content": "Be brief."}], TOOLS)
    assert with_system[0]["content"].startswith("Be brief.\n\nYou can call these tools.")


def test_the_llm_policy_reads_calls_written_as_text_and_survives_a_malformed_one() -> None:
    from trajforge.agents.llm import LLMPolicy
    from trajforge.envs.household import HouseholdEnv, task_for
    from trajforge.models.scripted import ScriptedModel
    from trajforge.rollout.episode import run_episode

    replies = [
        'I will look.\n<tool_call>{"name": "look", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "go", "arguments": {"target": </tool_call>',
    ]
    run = run_episode(HouseholdEnv(), LLMPolicy(ScriptedModel(replies)), task_for(3, 1))
    first, second = (run.messages[i] for i in run.assistant_indices())
    assert first.content == "I will look." and first.tool_calls
    assert first.tool_calls[0].name == "look" and first.tool_calls[0].parsed_arguments() == {}
    assert run.messages[run.assistant_indices()[0] + 1].role == "tool"
    assert second.tool_calls is None
    assert second.extra[tool_text.ERRORS_FIELD][0].startswith("tool call 1: not JSON")
    assert run.outcome.termination_reason == "agent_stop" and "error" not in run.metadata
