"""Answers read with the session's previous prompt ids: always equal to `orjson.loads`, and
only the new ids are parsed when the prompt repeats the previous call's ids."""

from __future__ import annotations

import json

import orjson
import pytest

from trajforge.proxy.answer_ids import AnswerReader


def _chat(n: int, prompt_ids: list, completion: list, content: str = "ok") -> dict:
    """A vLLM-style chat answer: prompt ids at the top, completion ids in the choice."""
    message = {"role": "assistant", "content": content}
    choice = {"index": 0, "message": message, "token_ids": completion}
    return {"id": f"r{n}", "choices": [choice], "prompt_token_ids": prompt_ids}


def _text(n: int, prompt_ids: list, completion: list) -> dict:
    """A text-completion answer: both in the first choice."""
    choice = {"index": 0, "text": "ok", "prompt_token_ids": prompt_ids, "token_ids": completion}
    return {"id": f"r{n}", "choices": [choice]}


def _session(shape, calls: int = 30):
    """Answers of a growing session: each prompt is the last prompt + completion + new ids."""
    prompt = list(range(500))
    for n in range(calls):
        completion = [10_000 + n, 20_000 + n]
        yield shape(n, list(prompt), completion)
        prompt += [*completion, 7, 8, 9]


@pytest.mark.parametrize("shape", [_chat, _text])
def test_a_growing_session_parses_only_its_new_ids(shape) -> None:
    reader = AnswerReader()
    answers = list(_session(shape))
    for answer in answers:
        assert reader.read("s", orjson.dumps(answer)) == answer
    # the first answer's 500 ids, then 3 new ids per call (the old parse read them all)
    assert reader.ids_parsed == 500 + 3 * (len(answers) - 1)


def test_a_retokenized_prompt_is_parsed_whole() -> None:
    reader = AnswerReader()
    first = _chat(0, [1, 2, 3, 40], [5])
    reader.read("s", orjson.dumps(first))
    changed = _chat(1, [1, 2, 3, 41, 5, 6], [7])  # the previous prompt's last id differs
    assert reader.read("s", orjson.dumps(changed)) == changed
    assert reader.ids_parsed == 4 + 6
    longer_id = _chat(2, [1, 2, 3, 41, 5, 60], [8])  # "6" then "60": whole ids only
    reader.read("s", orjson.dumps(_chat(2, [1, 2, 3, 41, 5, 6], [])))
    assert reader.read("s", orjson.dumps(longer_id)) == longer_id


def test_sessions_do_not_share_ids() -> None:
    reader = AnswerReader()
    reader.read("a", orjson.dumps(_chat(0, [1, 2, 3], [4])))
    other = _chat(0, [1, 2, 3, 4, 9], [5])
    assert reader.read("b", orjson.dumps(other)) == other
    assert reader.ids_parsed == 3 + 5


@pytest.mark.parametrize(
    "answer",
    [
        _chat(0, [1, 2], [3], content='say "prompt_token_ids":[1,2] to me'),
        _chat(0, [1, 2], [3], content="\u0000prompt ids"),
        _chat(0, [[1, 2], [3]], [3]),
        _chat(0, ["1]", 2], [3]),
        _chat(0, [], []),
        {"id": "r", "choices": [{"message": {"role": "assistant", "content": "no ids"}}]},
        {"id": "r", "choices": [], "usage": {"prompt_token_ids": [1, 2]}},
        [1, 2, 3],
    ],
)
def test_any_answer_reads_as_orjson_reads_it(answer) -> None:
    reader = AnswerReader()
    reader.read("s", orjson.dumps(_chat(9, [1, 2], [3])))
    assert reader.read("s", orjson.dumps(answer)) == answer


def test_spaces_between_the_ids_are_read_too() -> None:
    reader = AnswerReader()
    for answer in _session(_chat, calls=3):
        assert reader.read("s", json.dumps(answer).encode()) == answer


@pytest.mark.parametrize(
    "content", [b'{"prompt_token_ids":[1,2,,3], "choices": []}', b'{"prompt_token_ids":[1,2]', b""]
)
def test_a_malformed_answer_raises_as_orjson_does(content: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        AnswerReader().read("s", content)


def test_a_prompt_sent_again_reuses_its_ids() -> None:
    reader = AnswerReader()
    first = _chat(0, list(range(100)), [5, 6])
    reader.read("s", orjson.dumps(first))
    again = _chat(1, list(range(100)), [8])
    assert reader.read("s", orjson.dumps(again)) == again
    longer = _chat(2, [*range(100), 77], [9])  # the same prompt and a new turn, no completion
    assert reader.read("s", orjson.dumps(longer)) == longer
    assert reader.ids_parsed == 100 + 0 + 1
