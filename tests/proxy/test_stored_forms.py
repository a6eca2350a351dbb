"""The stored forms of a session's calls are the same whether the prompt ids shared with
the previous call are counted once (by the drift audit) or again for each form."""

from __future__ import annotations

import json
from pathlib import Path

from trajforge.proxy.record import CapturedCall, stored_call
from trajforge.proxy.recorder import Recorder
from trajforge.proxy.session import trajectory_id
from trajforge.schema import compact_llm_calls
from trajforge.store import Store
from trajforge.store.proxy_calls import session_call_documents

SYSTEM = {"role": "system", "content": "you fix bugs"}


def _call(n: int, messages: list, prompt: list[int], completion: list[int] | None) -> CapturedCall:
    answer = {"role": "assistant", "content": f"answer {n}"}
    return CapturedCall(
        session="s",
        endpoint="chat/completions",
        request={"model": "m", "messages": messages},
        response={"id": f"r{n}", "choices": [{"message": answer}], "prompt_token_ids": prompt},
        status=200,
        started_at=float(n),
        latency_s=0.01,
        prompt_token_ids=prompt,
        completion_token_ids=completion,
    )


def _session() -> list[CapturedCall]:
    """Main turns with and without completion ids, a side call, a retokenized prompt and a
    failed call, each prompt extending the last unless said otherwise."""
    first = [SYSTEM, {"role": "user", "content": "fix foo"}]
    second = [
        *first,
        {"role": "assistant", "content": "answer 0"},
        {"role": "user", "content": "go"},
    ]
    third = [
        *second,
        {"role": "assistant", "content": "answer 2"},
        {"role": "user", "content": "?"},
    ]
    side = [{"role": "user", "content": "write a title"}]
    failed = CapturedCall(
        session="s",
        endpoint="chat/completions",
        request={"model": "m", "messages": third},
        status=500,
        error="upstream failed",
        started_at=5.0,
        latency_s=0.01,
    )
    return [
        _call(0, first, [1, 2, 3], [4]),
        _call(1, side, [9, 9], [8]),
        _call(2, second, [1, 2, 3, 4, 5], [6]),
        _call(3, third, [1, 2, 7, 4, 5, 6, 7], [8]),  # retokenized: differs at the third id
        _call(4, [*third, {"role": "user", "content": "more"}], [1, 2, 7, 4, 5, 6, 7, 8, 9], None),
        failed,
        _call(6, [*third, {"role": "user", "content": "again"}], [1, 2, 7, 4, 5, 6, 7, 8, 1], [2]),
        _call(
            7,
            [*third, {"role": "user", "content": "again"}],
            [1, 2, 7, 4, 5, 6, 7, 8, 1, 2, 3],
            [4],
        ),
    ]


def test_counted_once_or_again_the_stored_forms_agree(tmp_path: Path) -> None:
    calls = _session()
    with Store(tmp_path / "s.db") as store:
        recorder = Recorder(store)
        for call in calls:
            recorder.submit(call).result()
        recorder.flush()
        recorder.close()
        rows = list(session_call_documents(store, "s"))
        trajectory = store.get(trajectory_id("s"))
        stored = store.db.execute(
            "SELECT doc FROM trajectories WHERE id = ?", (trajectory_id("s"),)
        ).fetchone()[0]
    previous = [None, *calls[:-1]]
    expected = [
        stored_call(c, p).model_dump_json().encode() for c, p in zip(calls, previous, strict=True)
    ]
    assert rows == expected
    counted_again = [c.prompt_token_prefix for c in compact_llm_calls(trajectory.llm_calls)]
    stored_prefixes = [c.get("prompt_token_prefix") for c in json.loads(stored)["llm_calls"]]
    assert stored_prefixes == counted_again == [None, None, None, 2, 8, None, 8, 10]
