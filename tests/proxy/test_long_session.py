"""A long recorded session: the bytes written per call stay flat from the first call to the last.

Each call of an agent sends the whole history again (and its prompt token ids grow with it);
the store keeps only what is new per call, in the call's row and in the session's document.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import trajforge.proxy.recorder as recorder_module
from trajforge.proxy.record import CapturedCall, loaded_call
from trajforge.proxy.recorder import Recorder
from trajforge.proxy.session import SessionState, trajectory_id
from trajforge.schema import Outcome, Trajectory
from trajforge.store import Store
from trajforge.store.proxy_calls import session_call_documents

CALLS = 2000


def _answer(n: int, answer: dict, prompt_ids: list[int]) -> dict:
    """The upstream's answer, which repeats the prompt's ids as vLLM does: in its body, or
    (every third call) in its first choice."""
    if n % 3 == 2:
        return {"id": f"r{n}", "choices": [{"message": answer, "prompt_token_ids": prompt_ids}]}
    return {"id": f"r{n}", "choices": [{"message": answer}], "prompt_token_ids": prompt_ids}


def _calls(session: str):
    """A sequential agent session: each prompt is the last prompt, its answer and a new turn."""
    messages = [{"role": "system", "content": "solve it"}, {"role": "user", "content": "task"}]
    prompt_ids = list(range(100))
    for n in range(CALLS):
        answer = {"role": "assistant", "content": f"step {n}: run ls"}
        completion = [n]
        yield CapturedCall(
            session=session,
            endpoint="chat/completions",
            request={"model": "m", "messages": list(messages)},
            response=_answer(n, answer, list(prompt_ids)),
            status=200,
            started_at=float(n),
            latency_s=0.01,
            prompt_token_ids=list(prompt_ids),
            completion_token_ids=completion,
            logprobs=[-0.5],
        )
        messages += [answer, {"role": "user", "content": f"output of step {n}"}]
        prompt_ids += [*completion, 7]


def _row_bytes(store: Store, session: str) -> list[int]:
    docs = store.db.execute(
        "SELECT length(doc) FROM proxy_calls WHERE session = ? ORDER BY seq", (session,)
    )
    return [size for (size,) in docs]


@pytest.fixture
def recorded(tmp_path: Path):
    """Record the session; note the stored document's size at 200 and at 2,000 calls."""
    sizes: dict[int, int] = {}
    with Store(tmp_path / "long.db") as store:
        recorder = Recorder(store)
        for n, call in enumerate(_calls("long"), start=1):
            recorder.submit(call).result()
            if n in (200, CALLS):
                recorder.flush()
                (size,) = store.db.execute(
                    "SELECT length(doc) FROM trajectories WHERE id = ?", (trajectory_id("long"),)
                ).fetchone()
                sizes[n] = size
        recorder.close()
        yield store, sizes


def test_call_rows_stay_flat(recorded) -> None:
    store, _ = recorded
    rows = _row_bytes(store, "long")
    assert len(rows) == CALLS
    early, late = rows[10:110], rows[-100:]
    assert max(late) <= 1.2 * max(early), (max(early), max(late))


def test_call_rows_read_back_whole(recorded) -> None:
    store, _ = recorded
    previous = None
    for document, call in zip(session_call_documents(store, "long"), _calls("long"), strict=True):
        previous = loaded_call(CapturedCall.model_validate_json(document), previous)
        assert previous == call


def test_session_document_grows_by_a_constant_per_call(recorded) -> None:
    _, sizes = recorded
    per_call_200, per_call_2000 = sizes[200] / 200, sizes[CALLS] / CALLS
    assert per_call_2000 <= 1.3 * per_call_200, (per_call_200, per_call_2000)


def _check_whole(traj: Trajectory) -> None:
    assert len(traj.llm_calls) == CALLS and len(traj.messages) == 2 * CALLS + 1
    for index, call in enumerate(_calls("long")):
        assert traj.llm_calls[index].prompt_token_ids == call.prompt_token_ids


def test_the_long_session_reads_back_whole(recorded) -> None:
    store, _ = recorded
    _check_whole(store.get(trajectory_id("long")))
    recorder = Recorder(store)  # a restarted proxy rebuilds the session from its rows
    recorder.set_outcome("long", Outcome(success=True)).result()
    recorder.close()
    rebuilt = store.get(trajectory_id("long"))
    assert rebuilt.outcome.success is True
    _check_whole(rebuilt)


def test_sessions_past_the_memory_limit_are_dropped_and_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy that has seen many sessions keeps the recent ones; an old one called again
    is rebuilt from its rows and goes on where it stopped."""
    monkeypatch.setattr(recorder_module, "SESSIONS_IN_MEMORY", 2)
    names = [f"s{n}" for n in range(5)]
    calls = {name: list(itertools.islice(_calls(name), 4)) for name in names}
    with Store(tmp_path / "many.db") as store:
        recorder = Recorder(store)
        for name in names:
            for call in calls[name][:3]:
                recorder.submit(call).result()
        recorder.flush()
        assert list(recorder.sessions) == ["s3", "s4"]
        recorder.submit(calls["s0"][3]).result()
        recorder.flush()
        recorder.close()
        rebuilt = store.get(trajectory_id("s0"))
    assert [c.prompt_token_ids for c in rebuilt.llm_calls] == [
        c.prompt_token_ids for c in calls["s0"]
    ]
    assert [c.extra["seq"] for c in rebuilt.llm_calls] == [0, 1, 2, 3]


def _call(n: int, prompt_ids: list) -> CapturedCall:
    answer = {"role": "assistant", "content": f"step {n}"}
    return CapturedCall.model_construct(  # as the proxy builds it: lists kept, not copied
        session="s",
        endpoint="chat/completions",
        request={"model": "m", "messages": [{"role": "user", "content": "task"}]},
        response={"id": f"r{n}", "choices": [{"message": answer}]},
        status=200,
        started_at=float(n),
        latency_s=0.01,
        prompt_token_ids=prompt_ids,
        completion_token_ids=[100 + n],
        stream=False,
    )


def test_a_call_checks_only_its_prompt_ids_beyond_the_previous_call() -> None:
    """The ids that repeat the previous prompt + completion are taken as they are (the same
    list, not validated and copied again); new ids are still checked, and coerced as before."""
    state = SessionState(name="s")
    first = list(range(50))
    state.add(_call(0, first))
    second = [*first, 100, 7]
    assert state.add(_call(1, second)).prompt_token_ids is second
    third = [*second, 101, "8"]  # not an int: validated (and coerced) as any call's ids
    assert state.add(_call(2, third)).prompt_token_ids == [*second, 101, 8]
    with pytest.raises(ValueError, match="prompt_token_ids"):
        state.add(_call(3, [*third[:-1], 8, 101, "eight"]))
