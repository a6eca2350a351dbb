"""`CheckedParts`: a conversation re-sent at every turn has only its new messages checked,
and what the server reads, and the errors it gives, are those of checking the whole body."""

from __future__ import annotations

import json

import orjson
import pytest

from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.envs.household.tools import TOOLS
from trajforge.serve import request as wire
from trajforge.serve.request import BadRequest, CheckedParts, parse_chat_request


def turns(count: int) -> list[bytes]:
    """The bodies an agent sends over `count` turns: each repeats the last and adds two."""
    messages = [
        {"role": m.role, "content": m.content} for m in HouseholdEnv().reset(task_for(3, 1))
    ]
    bodies = []
    for turn in range(count):
        bodies.append(orjson.dumps({"messages": messages, "tools": TOOLS, "max_tokens": 16}))
        call = {"id": f"call_{turn}", "type": "function",
                "function": {"name": "look", "arguments": "{}"}}  # fmt: skip
        messages = [
            *messages,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": f"you see {turn} apples"},
        ]
    return bodies


@pytest.fixture
def validated(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Every message `ChatMessage.model_validate` checks, in order."""
    seen: list[dict] = []
    original = wire.ChatMessage.model_validate

    def counting(message: dict) -> wire.ChatMessage:
        seen.append(message)
        return original(message)

    monkeypatch.setattr(wire.ChatMessage, "model_validate", counting)
    return seen


def test_only_new_messages_are_checked_and_the_request_is_the_same(validated: list) -> None:
    checked = CheckedParts()
    bodies = turns(4)
    for turn, raw in enumerate(bodies):
        before = len(validated)
        fast = parse_chat_request(raw, checked)
        whole = parse_chat_request(raw)
        assert fast.model_dump() == whole.model_dump()
        assert fast.body == whole.body == orjson.loads(raw)
        opening = len(orjson.loads(bodies[0])["messages"])
        assert len(validated) - before == (opening if turn == 0 else 2)


BAD = {
    "a message of a number": ({"role": "user", "content": "hi"}, 1, "messages.1"),
    "an unknown role": ({"role": "user", "content": "hi"}, {"role": "robot"}, "messages.1"),
    "a tool call without a name": (
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "x"}]},
        "messages.1",
    ),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_a_bad_message_after_checked_ones_gets_the_whole_body_error(case: str) -> None:
    good, bad, named = BAD[case]
    checked = CheckedParts()
    parse_chat_request(orjson.dumps({"messages": [good]}), checked)
    raw = orjson.dumps({"messages": [good, bad], "tools": TOOLS})
    with pytest.raises(BadRequest) as fast:
        parse_chat_request(raw, checked)
    with pytest.raises(BadRequest) as whole:
        parse_chat_request(raw)
    assert str(fast.value) == str(whole.value)
    assert named in str(fast.value)


def test_checked_tools_and_fields_still_fail_as_before() -> None:
    checked = CheckedParts()
    good = {"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}
    parse_chat_request(orjson.dumps(good), checked)
    for body, named in (({**good, "max_tokens": "12"}, "max_tokens"),
                        ({**good, "tools": [*TOOLS, 1]}, f"tools.{len(TOOLS)}")):  # fmt: skip
        with pytest.raises(BadRequest, match=named):
            parse_chat_request(orjson.dumps(body), checked)


def test_parts_too_deep_to_key_are_checked_each_time() -> None:
    deep: object = "x"
    for _ in range(400):  # orjson reads this depth and does not write it
        deep = [deep]
    message = {"role": "user", "content": "hi", "extra": deep}
    tools = [{"function": {"name": "f", "parameters": {"properties": {}, "extra": deep}}}]
    checked = CheckedParts()
    for body in ({"messages": [message]}, {"messages": [message], "tools": tools}):
        raw = json.dumps(body).encode()
        assert parse_chat_request(raw, checked).model_dump() == parse_chat_request(raw).model_dump()
    assert len(checked.memo) == 0


def test_the_kept_parts_stay_within_their_bytes() -> None:
    checked = CheckedParts(max_bytes=2_000)
    for raw in turns(12):
        parse_chat_request(raw, checked)
        assert checked.memo.held_bytes <= 2_000
        assert checked.memo.held_bytes == sum(len(key) for key in checked.memo._values)
