"""Upstream fault injection: time-outs, server errors and truncated answers, by seed."""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping

from trajforge.errors import UserError
from trajforge.proxy.config import FaultConfig

FAULT_KINDS = ("timeout", "5xx", "truncate")
FAULT_HEADER = "x-trajforge-fault"
_SPEC_KEYS = {
    "timeout": "timeout",
    "5xx": "server_error",
    "truncate": "truncate",
    "delay": "timeout_delay_s",
    "seed": "seed",
}


def parse_fault_spec(spec: str) -> FaultConfig:
    """A `FaultConfig` from `timeout=0.1,5xx=0.05,truncate=0.05,delay=1,seed=7`."""
    values: dict[str, float | int] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, number = item.partition("=")
        if name not in _SPEC_KEYS:
            raise UserError(f"--faults: unknown fault '{name}'; known: {', '.join(_SPEC_KEYS)}")
        try:
            values[_SPEC_KEYS[name]] = int(number) if name == "seed" else float(number)
        except ValueError:
            raise UserError(f"--faults: '{item}' needs a number after '='") from None
    try:
        return FaultConfig.model_validate(values)
    except ValueError as exc:
        raise UserError(f"--faults: {str(exc).splitlines()[-1].strip()}") from None


class FaultInjector:
    """Draws, per call, whether (and which) fault to inject."""

    def __init__(self, config: FaultConfig) -> None:
        self.config = config
        self._random = random.Random(config.seed)
        self._lock = threading.Lock()

    def draw(self, headers: Mapping[str, str]) -> str | None:
        """The fault kind to inject into this call, or None."""
        forced = headers.get(FAULT_HEADER) if self.config.header_override else None
        if forced in FAULT_KINDS:
            return forced
        with self._lock:
            roll = self._random.random()
        for kind, share in zip(
            FAULT_KINDS,
            (self.config.timeout, self.config.server_error, self.config.truncate),
            strict=True,
        ):
            if roll < share:
                return kind
            roll -= share
        return None
