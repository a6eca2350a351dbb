"""Assembly: the calls of one session become one trajectory, kept up to date call by call.

The messages are the main conversation's last prompt plus its answer. Harnesses also make
side calls in the same session (a title, a summary, a `/completions` probe): a call is a side
call when it uses another endpoint than the main conversation, or when its first message
differs from the main conversation's and its prompt is not longer than that conversation.
A side call is kept in `llm_calls` (`extra["side_call"]`, drift status `side`) but does not
replace the messages; a longer call with another opening takes over as the main conversation
(a harness that rewrote its system prompt). Each call whose answer appears at
its position in those messages is linked to it by `message_index`; calls made on a history
that was later rewritten keep `message_index=None`. Every call carries its drift audit in
`extra["drift"]`; upstream failures become `Fault`s at the index the answer would have had.
A session stopped by the early-failure monitor ends with termination reason `monitor`; its
refused calls are in `llm_calls` (status 403, no answer) and the decision is in
`metadata["monitor"]`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from trajforge.openai_wire import to_message
from trajforge.proxy.drift import DriftAudit, audit, normalize_message
from trajforge.proxy.record import CapturedCall, MonitorStop
from trajforge.schema import (
    Fault,
    LLMCall,
    Message,
    Outcome,
    PromptPrefixes,
    Source,
    Task,
    Trajectory,
    Usage,
    compact_llm_calls,
)

_ROLE_ALIASES = {"developer": "system", "function": "tool"}
_TOKEN_FIELDS = ("prompt_token_ids", "token_ids")


def trajectory_id(session: str) -> str:
    """The stable id of a session's trajectory."""
    return hashlib.sha256(f"proxy-session:{session}".encode()).hexdigest()[:20]


def chat_message(record: dict[str, Any]) -> Message:
    """A schema `Message` from an OpenAI chat message (an unreadable one is kept as user text)."""
    role = _ROLE_ALIASES.get(str(record.get("role")), record.get("role"))
    try:
        return to_message({**record, "role": role})
    except ValueError:
        return Message(role="user", content=str(record.get("content")), extra={"raw": record})


def _slim_response(response: dict[str, Any] | None) -> dict[str, Any] | None:
    """The answer without the token arrays that have their own fields."""
    if response is None:
        return None
    slim = {k: v for k, v in response.items() if k not in _TOKEN_FIELDS}
    slim["choices"] = [
        {k: v for k, v in choice.items() if k not in (*_TOKEN_FIELDS, "logprobs")}
        for choice in response.get("choices") or []
        if isinstance(choice, dict)
    ]
    return slim


def response_usage(response: dict[str, Any] | None) -> Usage | None:
    """The token usage an answer reports, or None."""
    usage = (response or {}).get("usage")
    if not isinstance(usage, dict):
        return None
    return Usage(
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        total_tokens=usage.get("total_tokens"),
    )


@dataclass
class SessionState:
    """One session's calls so far and what the next drift audit compares against."""

    name: str
    harness: str = "proxy"
    calls: list[LLMCall] = field(default_factory=list)
    answers: list[tuple | None] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    last: CapturedCall | None = None
    """The session's previous call (main or side): the base of its stored row."""
    main: CapturedCall | None = None
    """The last call of the main conversation: the trajectory's messages come from it."""
    outcome: Outcome = field(default_factory=Outcome)
    written_outcome: Outcome | None = None
    """The outcome as last written to (or read from) the store; None once a newer one was
    posted to the proxy. A stored outcome that differs was set elsewhere (`trajforge
    outcome`) and is kept."""
    previous_messages: list[tuple] | None = None
    previous_tokens: list[int] | None = None
    monitor: dict[str, Any] | None = None
    main_opening: tuple | None = None
    main_length: int = 0
    last_prompt: tuple[list, list[tuple]] = ([], [])
    """The previous call's prompt messages and their normalized form (reused when the next
    prompt repeats them, so a call normalizes only its new messages)."""
    prompt_prefixes: PromptPrefixes = field(default_factory=PromptPrefixes)
    """Each call's prompt ids that repeat the calls before it, counted once as it is added."""
    tokens_of_last_call: bool = False
    """Whether `previous_tokens` are the previous call's prompt + completion ids (then the
    drift audit's count of shared prompt ids is also the count the stored forms need)."""
    prompt_ids_shared: int | None = None
    """How many of the last added call's prompt ids repeat the previous call's prompt +
    completion ids, when the drift audit counted them (a session's prompts can hold
    hundreds of thousands of ids: each comparison is made once)."""

    @property
    def next_seq(self) -> int:
        return len(self.calls)

    def add(self, captured: CapturedCall) -> LLMCall:
        """Audit, record and link one call; returns its `LLMCall`."""
        prompt = captured.prompt_messages()
        normalized = self._normalized(prompt)
        side = self._is_side_call(captured, normalized)
        if side:
            drift = DriftAudit(status="side", common_prefix_messages=0)
        else:
            drift = audit(
                self.previous_messages, self.previous_tokens, normalized, captured.prompt_token_ids
            )
        answer = captured.answer_message()
        if captured.monitor_stop is not None:
            self._refused_by_monitor(captured.monitor_stop)
        counted = not side and self.tokens_of_last_call and bool(captured.prompt_token_ids)
        self.prompt_ids_shared = drift.common_prefix_tokens if counted else None
        call = self._llm_call(captured, len(prompt), drift.model_dump())
        if side:
            call.extra["side_call"] = True
        self.calls.append(call)
        tokens = _expected_tokens(captured)  # prompt + completion ids, joined once
        self.prompt_prefixes.add(call, self.prompt_ids_shared, tokens)
        self.answers.append(normalize_message(answer) if answer else None)
        self.last = captured
        self.tokens_of_last_call = False
        if side:
            return call
        self.main = captured
        self.main_opening = normalized[0] if normalized else None
        self.main_length = len(prompt) + (answer is not None)
        if captured.fault is not None:
            detail = ("injected: " if captured.fault.injected else "observed: ") + (
                captured.fault.detail
            )
            self.faults.append(
                Fault(
                    message_index=len(prompt),
                    kind=captured.fault.kind,
                    tool=captured.endpoint,
                    detail=detail,
                )
            )
        if answer is not None:
            self.previous_messages = [*normalized, normalize_message(answer)]
            self.previous_tokens = tokens
            self.tokens_of_last_call = bool(self.previous_tokens and captured.prompt_token_ids)
        return call

    def _is_side_call(self, captured: CapturedCall, normalized: list[tuple]) -> bool:
        """Whether a call is outside the main conversation (see the module docstring)."""
        if self.main is None:
            return False
        if captured.endpoint != self.main.endpoint:
            return True
        opening = normalized[0] if normalized else None
        return opening != self.main_opening and len(normalized) <= self.main_length

    def _normalized(self, prompt: list) -> list[tuple]:
        raw, normalized = self.last_prompt
        kept = len(raw) if prompt[: len(raw)] == raw else 0
        result = normalized[:kept] + [normalize_message(m) for m in prompt[kept:]]
        self.last_prompt = (prompt, result)
        return result

    def relayed_answers(self) -> list[tuple[int, tuple, LLMCall]]:
        """(message index, normalized answer, call) of every main-conversation call that got
        an answer."""
        return [
            (call.extra["prompt_messages"], answer, call)
            for call, answer in zip(self.calls, self.answers, strict=True)
            if answer is not None and not call.extra.get("side_call")
        ]

    def _refused_by_monitor(self, stop: MonitorStop) -> None:
        """Note the monitor's stop (the first refused call decides) and count refused calls."""
        if self.monitor is None:
            self.monitor = {**stop.model_dump(), "seq": self.next_seq, "refused_calls": 0}
        self.monitor["refused_calls"] += 1

    def _llm_call(self, captured: CapturedCall, n_prompt: int, drift: dict) -> LLMCall:
        """The call's `LLMCall`. Its prompt ids are checked past those equal to the previous
        call's prompt + completion ids (checked then): validating all of them cost 0.5 ms
        per call at 35k ids, for ids seen before."""
        response = captured.response or {}
        request = {k: v for k, v in captured.request.items() if k not in ("messages", "prompt")}
        choice = (response.get("choices") or [{}])[0] if captured.error is None else {}
        prompt_ids = captured.prompt_token_ids
        checked = _ints_after(prompt_ids, self.prompt_ids_shared or 0)
        call = LLMCall(
            id=str(response.get("id") or f"{self.name}/{self.next_seq}"),
            model=response.get("model") or captured.request.get("model"),
            request=request,
            response=_slim_response(captured.response),
            prompt_token_ids=None if checked else prompt_ids,
            completion_token_ids=captured.completion_token_ids,
            logprobs=captured.logprobs,
            latency_s=captured.latency_s,
            usage=response_usage(captured.response),
            started_at=captured.started_at,
            error=captured.error,
            extra={
                "session": self.name,
                "seq": self.next_seq,
                "endpoint": captured.endpoint,
                "status": captured.status,
                "stream": captured.stream,
                "prompt_messages": n_prompt,
                "finish_reason": choice.get("finish_reason") if isinstance(choice, dict) else None,
                "drift": drift,
            },
        )
        if checked:
            call.prompt_token_ids = prompt_ids
        return call

    def trajectory(self) -> Trajectory:
        """The session as a trajectory (messages = the main conversation's last prompt + its
        answer)."""
        main = self.main
        messages = [chat_message(m) for m in main.prompt_messages()] if main else []
        answer = main.answer_message() if main else None
        if answer is not None:
            messages.append(chat_message(answer))
        final = [normalize_message(m.model_dump(exclude={"extra"})) for m in messages]
        calls = [
            self._linked(call, reply, final)
            for call, reply in zip(self.calls, self.answers, strict=True)
        ]
        return Trajectory(
            id=trajectory_id(self.name),
            task=Task(id=self.name, instruction=first_user_text(messages)),
            source=Source(
                harness=self.harness,
                model=_main_model(calls),
                run=self.name,
                format="proxy",
            ),
            messages=messages,
            tools=list((main.request.get("tools") if main else None) or []),
            outcome=self._outcome(),
            usage=_total_usage(calls),
            llm_calls=calls,
            faults=list(self.faults),
            metadata=self._metadata(len(calls)),
        )

    def stored_trajectory(self) -> Trajectory:
        """`trajectory()` in the store's compact form: each call's prompt token ids that repeat
        the previous call's are kept as a count (loading the document expands them)."""
        traj = self.trajectory()
        calls = compact_llm_calls(traj.llm_calls, self.prompt_prefixes.shared)
        return traj.model_copy(update={"llm_calls": calls})

    def _outcome(self) -> Outcome:
        """The outcome posted by the client; a monitor stop is its termination reason unless
        the client gave one."""
        if self.monitor is None or self.outcome.termination_reason is not None:
            return self.outcome
        return self.outcome.model_copy(update={"termination_reason": "monitor"})

    def _metadata(self, n_calls: int) -> dict[str, Any]:
        metadata: dict[str, Any] = {"session": self.name, "n_calls": n_calls}
        if self.monitor is not None:
            metadata["monitor"] = dict(self.monitor)
        return metadata

    @staticmethod
    def _linked(call: LLMCall, answer: tuple | None, final: list[tuple]) -> LLMCall:
        index = call.extra["prompt_messages"]
        linked = answer is not None and index < len(final) and final[index] == answer
        linked = linked and not call.extra.get("side_call")
        return call.model_copy(update={"message_index": index if linked else None})


def _main_model(calls: list[LLMCall]) -> str | None:
    """The model of the main conversation's last call (side calls often use another)."""
    main = [call for call in calls if not call.extra.get("side_call")]
    return main[-1].model if main else None


def _ints_after(ids: list | None, start: int) -> bool:
    """Whether `ids` is a list whose items from `start` on are all ints (not bools); False
    for `start` 0 (pydantic checks a whole list faster)."""
    if not isinstance(ids, list) or start <= 0:
        return False
    return all(type(item) is int for item in ids[start:])


def _expected_tokens(captured: CapturedCall) -> list[int] | None:
    if captured.prompt_token_ids is None or captured.completion_token_ids is None:
        return None
    return captured.prompt_token_ids + captured.completion_token_ids


def first_user_text(messages: list[Message]) -> str | None:
    """The text of the first user message (the task statement), or None."""
    return next((m.text() for m in messages if m.role == "user"), None)


def _total_usage(calls: list[LLMCall]) -> Usage:
    wall = sum(c.latency_s or 0.0 for c in calls)
    return Usage.summed([c.usage for c in calls if c.usage], wall_time_s=round(wall, 6))
