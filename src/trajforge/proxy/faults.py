"""Upstream fault injection: time-outs, server errors and truncated answers, by seed."""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping

from trajforge.errors import UserError
from trajforge.faultspec import parse_fault_spec
from trajforge.proxy.config import FaultConfig
from trajforge.schema import UpstreamFaultKind

INJECTED: tuple[UpstreamFaultKind, ...] = ("upstream_timeout", "upstream_5xx", "upstream_truncated")
"""The upstream faults the proxy can inject (the others are only observed)."""
FAULT_HEADER = "x-trajforge-fault"


def upstream_faults(texts: str | list[str], seed: int = 0, delay_s: float = 0.0) -> FaultConfig:
    """A `FaultConfig` from a fault spec such as `upstream_timeout:0.1,upstream_5xx:0.05`
    (the grammar of every `--faults` option); `seed` and `delay_s` set the draws and the
    wait of an injected timeout."""
    try:
        spec = parse_fault_spec(texts).require(INJECTED, "the proxy")
    except UserError as exc:
        raise UserError(f"--faults: {exc}") from None
    rates: dict[str, float | int] = {"seed": seed, "timeout_delay_s": delay_s}
    for rule in spec.rules:
        if rule.tools or rule.schedule or rule.rate is None:
            raise UserError(
                f"--faults: proxy fault '{rule.spec()}' takes a rate and no @TOOL or schedule, "
                "e.g. upstream_5xx:0.05"
            )
        rates[_CONFIG_FIELD[rule.kind]] = rule.rate
    return FaultConfig.model_validate(rates)


_CONFIG_FIELD = {
    "upstream_timeout": "timeout",
    "upstream_5xx": "server_error",
    "upstream_truncated": "truncate",
}


class FaultInjector:
    """Draws, per call, whether (and which) fault to inject."""

    def __init__(self, config: FaultConfig) -> None:
        self.config = config
        self._random = random.Random(config.seed)
        self._lock = threading.Lock()

    def draw(self, headers: Mapping[str, str]) -> UpstreamFaultKind | None:
        """The fault kind to inject into this call, or None."""
        forced = headers.get(FAULT_HEADER) if self.config.header_override else None
        chosen = next((kind for kind in INJECTED if kind == forced), None)
        if chosen is not None:
            return chosen
        with self._lock:
            roll = self._random.random()
        for kind, share in zip(
            INJECTED,
            (self.config.timeout, self.config.server_error, self.config.truncate),
            strict=True,
        ):
            if roll < share:
                return kind
            roll -= share
        return None
