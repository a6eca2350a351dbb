"""Tool-fault injection: a wrapper that makes any environment's tools unreliable.

Three kinds, as deployed tools fail:

- `transient`: a call fails with an error; retrying the identical call succeeds. Triggered
  by a rate (`transient:0.2`, a chance per call) or a schedule (`transient:#3+5`, the 3rd
  and 5th matching calls of the episode).
- `persistent`: a tool is down for the whole episode (`persistent@search`; without tools,
  one tool chosen by seed is down; with a rate, each tool is down with that chance).
- `silent`: the call runs but the agent sees plausible wrong data with no error: an
  environment-specific corruption when the environment offers `silent_result`, else the
  stale result of an earlier call of the same tool, else an empty result.

A spec is `KIND[:RATE][@TOOL,TOOL...]`; several rules are separated by commas. Every fault
sets `StepResult.fault`, which the episode loop records as a `Fault` at the tool message's
index. The injector is seeded per episode: the same seed gives the same faults.
"""

from __future__ import annotations

import random
import re
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from trajforge.envs.base import Environment, StepResult
from trajforge.errors import UserError
from trajforge.schema import Message, Outcome, Task, ToolCall

FaultKind = Literal["transient", "persistent", "silent"]
FAULT_KINDS: tuple[FaultKind, ...] = ("transient", "persistent", "silent")
DEFAULT_RATES = {"transient": 0.2, "silent": 0.1}
SPEC_HELP = (
    "a fault spec is KIND[:RATE][@TOOL,TOOL...] with KIND one of transient, persistent, "
    "silent; RATE a probability in [0, 1] or, for transient, a schedule like #3+5; several "
    "rules separated by commas (e.g. 'transient:0.2', 'persistent@search', 'silent:0.1')"
)
_RULE = re.compile(r"^(?P<kind>[A-Za-z_-]+)(?::(?P<rate>[^@]*))?(?:@(?P<tool>.*))?$")


class FaultRule(BaseModel):
    """One rule of a fault spec."""

    kind: FaultKind = Field(description="transient, persistent or silent.")
    rate: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Chance per call (per tool for persistent)."
    )
    schedule: list[int] = Field(
        default_factory=list, description="Transient only: 1-based numbers of failing calls."
    )
    tools: list[str] = Field(default_factory=list, description="Affected tools (empty: all).")

    def applies_to(self, tool: str) -> bool:
        return not self.tools or tool in self.tools

    def spec(self) -> str:
        text: str = self.kind
        if self.schedule:
            text += ":#" + "+".join(str(n) for n in self.schedule)
        elif self.rate is not None:
            text += f":{self.rate:g}"
        if self.tools:
            text += "@" + ",".join(self.tools)
        return text


class FaultSpec(BaseModel):
    """A parsed fault spec: the rules, applied in order persistent, transient, silent."""

    rules: list[FaultRule] = Field(default_factory=list, description="The rules.")

    def spec(self) -> str:
        """The canonical text form (parsing it gives the same spec)."""
        return ",".join(rule.spec() for rule in self.rules)


def check_tools(spec: FaultSpec, env: Environment) -> None:
    """UserError when a rule names a tool the environment does not have."""
    names = [tool["function"]["name"] for tool in env.tools]
    for rule in spec.rules:
        unknown = [tool for tool in rule.tools if tool not in names]
        if unknown:
            raise UserError(
                f"fault rule '{rule.spec()}' names unknown tool(s) {', '.join(unknown)}; "
                f"environment '{env.name}' has: {', '.join(names)}"
            )


def parse_fault_spec(texts: str | list[str] | None) -> FaultSpec:
    """Parse one spec or several (repeated `--faults`); raises UserError on bad input."""
    if texts is None:
        return FaultSpec()
    items = [texts] if isinstance(texts, str) else list(texts)
    rules: list[FaultRule] = []
    for text in items:
        for token in (part.strip() for part in text.split(",")):
            if not token:
                raise UserError(f"empty rule in fault spec '{text}'; {SPEC_HELP}")
            _add_token(rules, token, text)
    return FaultSpec(rules=rules)


def _add_token(rules: list[FaultRule], token: str, text: str) -> None:
    match = _RULE.match(token)
    if match is None:
        raise UserError(f"malformed fault rule '{token}' in '{text}'; {SPEC_HELP}")
    kind = next((k for k in FAULT_KINDS if k == match.group("kind")), None)
    if kind is not None:
        rules.append(_rule(kind, match.group("rate"), match.group("tool"), text))
        return
    bare = match.group("rate") is None and match.group("tool") is None
    if bare and rules and rules[-1].tools:  # `persistent@a,b`: b continues the tool list
        rules[-1].tools.append(token)
        return
    raise UserError(f"unknown fault kind '{match.group('kind')}' in '{text}'; {SPEC_HELP}")


def _rule(kind: FaultKind, rate: str | None, tool: str | None, text: str) -> FaultRule:
    if tool is not None and not tool.strip():
        raise UserError(f"fault rule in '{text}' has '@' but no tool; {SPEC_HELP}")
    tools = [tool.strip()] if tool else []
    if rate is None:
        return FaultRule(kind=kind, rate=DEFAULT_RATES.get(kind), tools=tools)
    if rate.startswith("#"):
        if kind != "transient":
            raise UserError(f"only transient faults take a schedule: '{text}'; {SPEC_HELP}")
        return FaultRule(kind=kind, schedule=_schedule(rate, text), tools=tools)
    try:
        value = float(rate)
    except ValueError:
        raise UserError(f"bad rate '{rate}' in '{text}'; {SPEC_HELP}") from None
    if not 0.0 <= value <= 1.0:
        raise UserError(f"rate {rate} in '{text}' is outside [0, 1]; {SPEC_HELP}")
    return FaultRule(kind=kind, rate=value, tools=tools)


def _schedule(rate: str, text: str) -> list[int]:
    try:
        numbers = sorted({int(n) for n in rate[1:].split("+")})
    except ValueError:
        raise UserError(f"bad schedule '{rate}' in '{text}'; {SPEC_HELP}") from None
    if not numbers or numbers[0] < 1:
        raise UserError(f"schedule '{rate}' in '{text}' must count calls from 1; {SPEC_HELP}")
    return numbers


@runtime_checkable
class SilentCorruption(Protocol):
    """Optional environment method: a plausible but wrong version of a tool result."""

    def silent_result(
        self, call: ToolCall, content: str, rng: random.Random
    ) -> tuple[str, str] | None:
        """(wrong content, what was altered), or None when this result has no good variant."""
        ...


class _InjectorState(BaseModel):
    down: list[str] = Field(default_factory=list)
    calls: dict[int, int] = Field(default_factory=dict)
    last_failed: tuple[str, str] | None = None
    last_results: dict[str, list[str]] = Field(default_factory=dict)


class FaultyEnvironment:
    """Wraps an environment; injects the faults of `spec`, seeded by `seed` and the task id.

    Everything not about tool calls (oracle, distractors, snapshot of the inner state) is
    delegated to the wrapped environment.
    """

    def __init__(self, inner: Environment, spec: FaultSpec, seed: int = 0) -> None:
        self.inner = inner
        self.spec = spec
        self.seed = seed
        self.name = inner.name
        self.rng = random.Random(seed)
        self.state = _InjectorState()

    def __getattr__(self, attr: str) -> Any:
        if attr == "inner":  # not yet set (e.g. while unpickling)
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self.inner.tools

    def bind_conversation(self, messages: list[Message]) -> None:
        self.inner.bind_conversation(messages)

    def close(self) -> None:
        self.inner.close()

    def reset(self, task: Task) -> list[Message]:
        opening = self.inner.reset(task)
        self.rng = random.Random(f"faults/{self.seed}/{task.id}")
        self.state = _InjectorState(down=self._down_tools())
        return opening

    def _down_tools(self) -> list[str]:
        names = [tool["function"]["name"] for tool in self.inner.tools]
        down: list[str] = []
        for rule in self.spec.rules:
            if rule.kind != "persistent":
                continue
            if rule.tools:
                down += rule.tools
            elif rule.rate is None:
                down.append(self.rng.choice(names))
            else:
                down += [name for name in names if self.rng.random() < rule.rate]
        return sorted(set(down))

    def step(self, call: ToolCall) -> StepResult:
        if call.name in self.state.down:
            return _failure("persistent", call, "is unavailable (503 Service Unavailable)")
        if self._transient_hits(call):
            self.state.last_failed = (call.name, call.arguments)
            return _failure("transient", call, "timed out (temporary failure; try again)")
        self.state.last_failed = None
        result = self.inner.step(call)
        if not result.error and self._silent_hits(call):
            return self._corrupt(call, result)
        self._remember(call, result)
        return result

    def _transient_hits(self, call: ToolCall) -> bool:
        retry = self.state.last_failed == (call.name, call.arguments)
        hit = False
        for number, rule in enumerate(self.spec.rules):
            if rule.kind != "transient" or not rule.applies_to(call.name):
                continue
            count = self.state.calls.get(number, 0) + 1
            self.state.calls[number] = count
            draw = self.rng.random()  # drawn on every call: the stream does not depend on hits
            hit = hit or (count in rule.schedule if rule.schedule else draw < (rule.rate or 0))
        return hit and not retry

    def _silent_hits(self, call: ToolCall) -> bool:
        hit = False
        for rule in self.spec.rules:
            if rule.kind == "silent" and rule.applies_to(call.name):
                hit = self.rng.random() < (rule.rate or 0) or hit
        return hit

    def _corrupt(self, call: ToolCall, result: StepResult) -> StepResult:
        variant = None
        if isinstance(self.inner, SilentCorruption):
            variant = self.inner.silent_result(call, result.content, self.rng)
        if variant is None:
            earlier = [c for c in self.state.last_results.get(call.name, []) if c != result.content]
            variant = (earlier[-1], "stale: an earlier result") if earlier else ("", "empty")
        content, detail = variant
        fault = {"kind": "silent", "tool": call.name, "detail": f"{detail} (no error shown)"}
        return result.model_copy(update={"content": content, "fault": fault})

    def _remember(self, call: ToolCall, result: StepResult) -> None:
        if not result.error:
            history = self.state.last_results.setdefault(call.name, [])
            history[:] = [*history[-2:], result.content]

    def evaluate(self) -> Outcome:
        return self.inner.evaluate()

    def snapshot(self) -> Any:
        return (self.inner.snapshot(), self.rng.getstate(), self.state.model_copy(deep=True))

    def restore(self, state: Any) -> None:
        inner, rng_state, injector = state
        self.inner.restore(inner)
        self.rng.setstate(rng_state)
        self.state = injector.model_copy(deep=True)


def _failure(kind: str, call: ToolCall, what: str) -> StepResult:
    message = f"Error: tool '{call.name}' {what}"
    return StepResult(
        content=message, error=True, fault={"kind": kind, "tool": call.name, "detail": message}
    )


def with_faults(env: Environment, spec: FaultSpec, seed: int = 0) -> Environment:
    """`env` wrapped with `spec`, or `env` itself when the spec is empty."""
    return FaultyEnvironment(env, spec, seed) if spec.rules else env
