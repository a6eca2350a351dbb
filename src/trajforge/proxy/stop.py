"""The early-failure monitor as a stop in the recording proxy.

Before a chat completion of a session is forwarded, the run so far is scored by that session's
`SessionMonitor`: the request's messages, with each earlier answer the proxy relayed linked to
the assistant message it produced (its usage, and its reasoning text when the upstream gave
one, as the monitor's features expect them). When the risk after the last completed step
reaches the threshold, the request is not forwarded: the client gets `refusal_response`, and
so does every later request of that session, without scoring again.

The refusal is HTTP 403 with an OpenAI-style error (code `monitor_stop`), the header
`X-Trajforge-Stop: monitor` and `x-should-retry: false`: the openai SDK retries 408, 409, 429
and 5xx (and obeys that header), and mini-swe-agent aborts on a 403 (PermissionDeniedError)
but retries a 400.

Scoring is CPU work that grows with the run, so it runs on a small thread pool, one decision
at a time per session (an asyncio lock: in arrival order), while the event loop keeps relaying
other calls. A request with fewer completed steps than the detector's `min_step` cannot be
stopped and is not scored. A scoring failure is logged and the request is forwarded.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeGuard

from fastapi.responses import JSONResponse

from trajforge.errors import UserError
from trajforge.openai_wire import error_body
from trajforge.proxy.config import MonitorStopConfig
from trajforge.proxy.drift import normalize_message
from trajforge.proxy.record import MonitorStop, chat_answer_message
from trajforge.proxy.recorder import Recorder
from trajforge.proxy.session import chat_message, first_user_text, response_usage
from trajforge.schema import LLMCall, Message, Task, Trajectory, Usage

if TYPE_CHECKING:  # scikit-learn loads only when a monitor is configured
    from trajforge.monitor import SessionMonitor
    from trajforge.monitor.detectors import Detector

log = logging.getLogger("trajforge.proxy")

STOP_HEADER = "X-Trajforge-Stop"
STOP_CODE = "monitor_stop"
STOP_STATUS = 403
SCORING_THREADS = 2


@dataclass(frozen=True)
class RelayedAnswer:
    """An answer the proxy relayed to a session, as the monitor needs it."""

    message: tuple
    """The answer as `normalize_message` sees it (to find it again in later prompts)."""
    usage: Usage | None
    reasoning: str


@dataclass
class ConvertedPrompt:
    """The schema messages of a session's last prompt; the next prompt converts only the
    messages that differ from it (a harness resends its whole history every call)."""

    raw: list[dict] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)

    def convert(self, prompt: list[dict]) -> list[Message]:
        same = 0
        for old, new in zip(self.raw, prompt, strict=False):
            if old != new:
                break
            same += 1
        self.messages = self.messages[:same] + [chat_message(m) for m in prompt[same:]]
        self.raw = prompt
        return list(self.messages)


@dataclass
class SessionGuard:
    """One session's monitor, the answers it was given (by message index) and its stop."""

    name: str
    monitor: SessionMonitor
    model: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    answers: dict[int, RelayedAnswer] = field(default_factory=dict)
    stop: MonitorStop | None = None
    prompt: ConvertedPrompt = field(default_factory=ConvertedPrompt)

    def decide(self, messages: list[dict], answers: dict[int, RelayedAnswer]) -> MonitorStop | None:
        """Score the run so far (in a worker thread, one call at a time per session); the
        stop when its risk reaches the threshold."""
        run = run_so_far(self.name, messages, answers, self.prompt.convert(messages))
        risk = self.monitor.last_risk if self.monitor.should_stop(run) else None
        if risk is None:
            return None
        return MonitorStop(
            risk=float(risk),
            threshold=float(self.monitor.threshold),
            step=completed_steps(messages),
            model=self.model,
        )

    def release(self) -> None:
        """Drop what only later decisions need (a stopped session is not scored again)."""
        self.prompt = ConvertedPrompt()
        self.answers.clear()
        self.monitor.reset()


def completed_steps(messages: list) -> int:
    """Assistant messages in a prompt whose observations follow them."""
    count = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
    last = messages[-1] if messages else None
    return count - 1 if isinstance(last, dict) and last.get("role") == "assistant" else count


def run_so_far(
    session: str,
    messages: list[dict],
    answers: dict[int, RelayedAnswer],
    converted: list[Message] | None = None,
) -> Trajectory:
    """The session as a trajectory up to this request: its messages (`converted` when given),
    and the proxy's answers linked (as `LLMCall`s with their usage) where they still sit in
    the prompt unchanged."""
    if converted is None:
        converted = [chat_message(m) for m in messages]
    calls = []
    for index, answer in sorted(answers.items()):
        if index >= len(messages) or normalize_message(messages[index]) != answer.message:
            continue
        calls.append(LLMCall(id=f"{session}/{index}", message_index=index, usage=answer.usage))
        if answer.reasoning:
            converted[index] = _with_reasoning(converted[index], answer.reasoning)
    task = Task(id=session, instruction=first_user_text(converted))
    return Trajectory(task=task, messages=converted, llm_calls=calls)


def _with_reasoning(message: Message, reasoning: str) -> Message:
    """The message with its reasoning where the step extractor reads it (the raw response)."""
    response = {"choices": [{"message": {"reasoning": reasoning}}]}
    return message.model_copy(update={"extra": {**message.extra, "response": response}})


def relayed_answer(message: tuple, usage: Usage | None, raw: dict | None) -> RelayedAnswer:
    """A `RelayedAnswer` from a normalized answer, its usage and the raw answer message (for
    its reasoning text: `reasoning`, or vLLM's `reasoning_content`)."""
    reasoning = (raw or {}).get("reasoning") or (raw or {}).get("reasoning_content")
    return RelayedAnswer(message, usage, reasoning if isinstance(reasoning, str) else "")


def refusal_message(session: str, stop: MonitorStop) -> str:
    return (
        f"session '{session}' was stopped by the trajforge failure monitor after step "
        f"{stop.step}: failure risk {stop.risk:.3f} >= threshold {stop.threshold:.3f}; "
        "its requests are no longer forwarded"
    )


def refusal_response(message: str) -> JSONResponse:
    """The answer to every request of a stopped session (not retried by the openai SDK)."""
    return JSONResponse(
        error_body(message, "permission_error", STOP_CODE),
        status_code=STOP_STATUS,
        headers={STOP_HEADER: "monitor", "x-should-retry": "false"},
    )


def stop_threshold(detector: Detector, config: MonitorStopConfig) -> float:
    """The configured threshold, or the detector's threshold for the configured loss."""
    if config.threshold is not None:
        return config.threshold
    loss = detector.config.default_loss if config.loss is None else config.loss
    threshold = detector.thresholds.get(str(loss))
    if threshold is None:
        known = ", ".join(sorted(detector.thresholds)) or "none"
        raise UserError(
            f"{config.model}: the model has no threshold for loss {loss} (it has: {known}); "
            "pick one of those or give a threshold"
        )
    return threshold


class MonitorGate:
    """The proxy's monitor: one detector loaded at start-up, one `SessionGuard` per session."""

    def __init__(self, config: MonitorStopConfig) -> None:
        from trajforge.monitor import SessionMonitor, load_detector

        self.config = config
        self.model = str(config.model)
        self.recorder: Recorder | None = None
        """Set by the proxy once its recorder runs: where recorded stops are looked up."""
        self._session_monitor = SessionMonitor
        self.detector = load_detector(config.model)
        self.threshold = stop_threshold(self.detector, config)
        self.guards: dict[str, SessionGuard] = {}
        self._pool = ThreadPoolExecutor(SCORING_THREADS, thread_name_prefix="trajforge-monitor")

    async def _guard(self, session: str) -> SessionGuard:
        """The session's guard. A session met for the first time since start-up starts from
        what is recorded of it (calls from before a restart): its stop and its answers."""
        guard = self.guards.get(session)
        if guard is not None:
            return guard
        stop, answers = await self._recorded(session)
        monitor = self._session_monitor(self.detector, self.threshold)
        guard = self.guards.setdefault(session, SessionGuard(session, monitor, self.model))
        if not guard.answers and guard.stop is None:
            guard.stop, guard.answers = stop, answers
        return guard

    async def _recorded(self, session: str) -> tuple[MonitorStop | None, dict[int, RelayedAnswer]]:
        if self.recorder is None:
            return None, {}
        try:
            stop, relayed = await asyncio.wrap_future(self.recorder.monitor_memory(session))
        except Exception:  # scoring still works, with token counts estimated
            log.exception("could not read what is recorded of session %s", session)
            return None, {}
        answers = {
            index: relayed_answer(message, call.usage, chat_answer_message(call.response or {}))
            for index, message, call in relayed
        }
        if stop is None:
            return None, answers
        return MonitorStop(**{name: stop[name] for name in MonitorStop.model_fields}), answers

    async def check(self, session: str, endpoint: str, body: dict[str, Any]) -> MonitorStop | None:
        """The session's stop, deciding it first for a chat completion that could be stopped."""
        guard = await self._guard(session)
        messages = body.get("messages")
        if guard.stop is not None or endpoint != "chat/completions":
            return guard.stop
        if not _scorable(messages) or completed_steps(messages) < guard.monitor.min_step:
            return None
        async with guard.lock:
            if guard.stop is None:
                guard.stop = await self._decide(guard, list(messages))
                if guard.stop is not None:
                    guard.release()
        return guard.stop

    async def _decide(self, guard: SessionGuard, messages: list[dict]) -> MonitorStop | None:
        loop = asyncio.get_running_loop()
        answers = dict(guard.answers)  # a snapshot: answers keep arriving on the event loop
        try:
            return await loop.run_in_executor(self._pool, guard.decide, messages, answers)
        except Exception:  # the monitor must not break the harness: forward, and say why
            log.exception("monitor could not score session %s; forwarding", guard.name)
            return None

    def observe(self, session: str, body: dict[str, Any], response: dict[str, Any]) -> None:
        """Remember a chat answer the proxy relayed (its place, usage and reasoning)."""
        guard = self.guards.get(session)
        messages = body.get("messages")
        answer = chat_answer_message(response)
        if guard is None or answer is None or not isinstance(messages, list):
            return
        guard.answers[len(messages)] = relayed_answer(
            normalize_message(answer), response_usage(response), answer
        )

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _scorable(messages: Any) -> TypeGuard[list[dict]]:
    return isinstance(messages, list) and all(isinstance(m, dict) for m in messages)
