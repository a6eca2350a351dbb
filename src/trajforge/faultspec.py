"""The one fault-spec grammar, shared by every `--faults` option.

A spec is `KIND[:RATE][@TARGET,TARGET...]`; several rules are separated by commas (and
repeated options are joined). KIND is a `FaultKind` of the schema: the tool faults an
environment injects (`transient`, `persistent`, `silent`) or the upstream faults the
recording proxy injects (`upstream_timeout`, `upstream_5xx`, `upstream_truncated`). RATE is
a probability in [0, 1] or, for transient faults, a schedule like `#3+5` (the 3rd and 5th
matching calls). Each consumer accepts the kinds that apply to it (`FaultSpec.require`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import BaseModel, Field

from trajforge.errors import UserError
from trajforge.schema import FAULT_KINDS, FaultKind

DEFAULT_RATES = {"transient": 0.2, "silent": 0.1}
SPEC_HELP = (
    f"a fault spec is KIND[:RATE][@TOOL,TOOL...] with KIND one of {', '.join(FAULT_KINDS)}; "
    "RATE a probability in [0, 1] or, for transient, a schedule like #3+5; several "
    "rules separated by commas (e.g. 'transient:0.2', 'persistent@search', 'silent:0.1')"
)
_RULE = re.compile(r"^(?P<kind>[A-Za-z0-9_-]+)(?::(?P<rate>[^@]*))?(?:@(?P<tool>.*))?$")


class FaultRule(BaseModel):
    """One rule of a fault spec."""

    kind: FaultKind = Field(description="A fault kind (see `trajforge.schema.FaultKind`).")
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

    def require(self, kinds: Sequence[FaultKind], where: str) -> FaultSpec:
        """Self, or a UserError naming a rule whose kind does not apply `where`."""
        for rule in self.rules:
            if rule.kind not in kinds:
                raise UserError(
                    f"fault kind '{rule.kind}' does not apply to {where}; "
                    f"kinds here: {', '.join(kinds)}"
                )
        return self


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
