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

A spec is `KIND[:RATE][@TOOL,TOOL...]` (the grammar of `trajforge.faultspec`, shared with the
proxy's upstream faults); several rules are separated by commas. Every fault
sets `StepResult.fault`, which the episode loop records as a `Fault` at the tool message's
index. The injector is seeded per episode: the same seed gives the same faults.
"""

from __future__ import annotations

import random
from typing import Any, Protocol, get_args, runtime_checkable

from pydantic import BaseModel, Field

from trajforge.envs.base import Environment, StepResult
from trajforge.errors import UserError
from trajforge.faultspec import FaultRule, FaultSpec, parse_fault_spec
from trajforge.schema import EnvFaultKind, Message, Outcome, Task, ToolCall

__all__ = [
    "FaultRule",
    "FaultSpec",
    "FaultyEnvironment",
    "check_tools",
    "parse_fault_spec",
    "with_faults",
]
ENV_FAULT_KINDS: tuple[EnvFaultKind, ...] = get_args(EnvFaultKind)


def check_tools(spec: FaultSpec, env: Environment) -> None:
    """UserError when a rule names a tool the environment does not have."""
    spec.require(ENV_FAULT_KINDS, "environments")
    names = [tool["function"]["name"] for tool in env.tools]
    for rule in spec.rules:
        unknown = [tool for tool in rule.tools if tool not in names]
        if unknown:
            raise UserError(
                f"fault rule '{rule.spec()}' names unknown tool(s) {', '.join(unknown)}; "
                f"environment '{env.name}' has: {', '.join(names)}"
            )


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
        self.spec = spec.require(ENV_FAULT_KINDS, "environments")
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
