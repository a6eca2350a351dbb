"""Progress lines for long commands: a line on stderr every so often, on a terminal or not.

    train sft: step 120/1200 (10%), 0.52 step/s, 612 tok/s, loss 0.8123, 3:50 elapsed, ETA 34:37

A command tells its reporter how far the work has got (`update(done, loss=...)`; an
`update` at the start makes the rates count from there) and adds to
counters shown as rates (`count("tok", 512)`); the reporter prints a line once `every`
seconds have passed since the last one, so a log file or CI shows that the command is alive,
how fast it goes and when it will end, and a fast command prints nothing. `finish()` prints a
last line when earlier ones were printed. Rates and the ETA are measured from the first update
on (so neither start-up time nor the steps a resumed run had done before count).

Work that has no count to report (one fork, one judged patch, one export) runs inside
`heartbeat(label)`: a background thread prints `label: <what>, 1:15 elapsed` every `every`
seconds until the work ends, so it too shows it is alive.

`every` defaults to 15 seconds; the environment variable `TRAJFORGE_PROGRESS_EVERY` sets it
(0: a line at every update).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TextIO, TypeVar

T = TypeVar("T")

EVERY_VARIABLE = "TRAJFORGE_PROGRESS_EVERY"
DEFAULT_EVERY = 15.0


def default_every() -> float:
    """Seconds between lines: `$TRAJFORGE_PROGRESS_EVERY`, else 15."""
    try:
        return max(0.0, float(os.environ.get(EVERY_VARIABLE, DEFAULT_EVERY)))
    except ValueError:
        return DEFAULT_EVERY


def clock_time(seconds: float) -> str:
    """`4:05`, `1:02:03`."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class ProgressLines:
    """Throttled one-line progress reports (see the module docstring)."""

    def __init__(
        self, label: str, total: int | None, unit: str, *, every: float | None = None,
        stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self.label, self.total, self.unit = label, total, unit
        self.done = 0
        self.every = default_every() if every is None else every
        self.stream, self.clock = stream, clock
        self.began = self.last = clock()
        self.fields: dict[str, object] = {}
        self.counters: dict[str, float] = {}
        self.base: tuple[float, int, dict[str, float]] | None = None
        self.printed = 0
        self.printed_done: int | None = None

    def update(self, done: int, **fields: object) -> None:
        """The work is `done` units far; `fields` are shown as `name value`."""
        self.done = done
        self.fields.update(fields)
        self._start_rates()
        self._maybe_print()

    def show(self, done: int, **fields: object) -> None:
        """A line now, with exactly these fields: an event worth a line of its own (a
        finished training iteration with its figures)."""
        self.done = done
        self.fields = dict(fields)
        self._start_rates()
        self._print(self.clock())

    def advance(self, units: int = 1, **fields: object) -> None:
        self.update(self.done + units, **fields)

    def each(self, items: Iterable[T]) -> Iterator[T]:
        """`items`, advancing by one after each (the rates count from the start)."""
        self.update(self.done)
        for item in items:
            yield item
            self.advance()

    def count(self, name: str, amount: float) -> None:
        """Add to a counter shown as `N name/s`."""
        self.counters[name] = self.counters.get(name, 0.0) + amount

    def finish(self) -> None:
        """A last line, if the command has printed any (a fast one stays silent)."""
        if self.printed and self.printed_done != self.done:
            self._print(self.clock())

    def _start_rates(self) -> None:
        if self.base is None:
            self.base = (self.clock(), self.done, dict(self.counters))

    def _maybe_print(self) -> None:
        now = self.clock()
        if now - self.last >= self.every:
            self._print(now)

    def _print(self, now: float) -> None:
        self.last = now
        self.printed += 1
        self.printed_done = self.done
        stream = self.stream or sys.stderr
        stream.write(self.line(now) + "\n")
        stream.flush()

    def line(self, now: float) -> str:
        rate = self._rate(now)
        parts = [self._position()]
        if rate is not None and self.base is not None:
            parts += self._rates(now - self.base[0], rate, self.base[2])
        parts += [f"{name} {value}" for name, value in self.fields.items()]
        parts.append(f"{clock_time(now - self.began)} elapsed")
        if rate is not None and self.total is not None and self.done < self.total:
            parts.append(f"ETA {clock_time((self.total - self.done) / rate)}")
        return f"{self.label}: " + ", ".join(parts)

    def _rate(self, now: float) -> float | None:
        """Units per second since the first update (None before there is a second one)."""
        if self.base is None or now <= self.base[0] or self.done <= self.base[1]:
            return None
        return (self.done - self.base[1]) / (now - self.base[0])

    def _rates(self, seconds: float, rate: float, counted: dict[str, float]) -> list[str]:
        rates = [f"{_number(rate)} {self.unit}/s"]
        for name, value in self.counters.items():
            rates.append(f"{_number((value - counted.get(name, 0.0)) / seconds)} {name}/s")
        return rates

    def _position(self) -> str:
        if self.total is None:
            return f"{self.unit} {self.done}"
        share = f" ({self.done / self.total:.0%})" if self.total else ""
        return f"{self.unit} {self.done}/{self.total}{share}"


@contextmanager
def heartbeat(
    label: str, what: str = "working", *, every: float | None = None, stream: TextIO | None = None
) -> Iterator[Callable[[str], None]]:
    """Lines `label: <what>, <elapsed> elapsed` every `every` seconds while the block runs
    (none when it is fast); the yielded function names what is being done now."""
    interval = default_every() if every is None else every
    state = {"what": what}
    done = threading.Event()
    began = time.monotonic()

    def beat() -> None:
        while not done.wait(max(interval, 0.05)):
            elapsed = clock_time(time.monotonic() - began)
            out = stream or sys.stderr
            out.write(f"{label}: {state['what']}, {elapsed} elapsed\n")
            out.flush()

    thread = threading.Thread(target=beat, name=f"heartbeat {label}", daemon=True)
    thread.start()
    try:
        yield lambda now: state.update(what=now)
    finally:
        done.set()
        thread.join()


def _number(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"
