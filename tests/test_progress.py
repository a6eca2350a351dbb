"""Progress lines: throttled by time, rates and ETA from the first update, silent when fast."""

from __future__ import annotations

import io
import time

from trajforge.progress import (
    EVERY_VARIABLE,
    ProgressLines,
    clock_time,
    default_every,
    heartbeat,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_a_line_every_interval_with_rate_counters_and_eta() -> None:
    clock, out = FakeClock(), io.StringIO()
    lines = ProgressLines("train sft", 100, "step", every=10, stream=out, clock=clock)
    clock.now += 4  # start-up time: not part of the rate
    for step in range(1, 101):
        lines.count("tok", 50)
        lines.update(step, loss=f"{1 / step:.3f}")
        clock.now += 2
    lines.finish()
    printed = _lines(out)
    assert len(printed) == 21  # one per 10 s over 200 s, and the last state at the end
    assert printed[0] == (
        "train sft: step 4/100 (4%), 0.5 step/s, 25 tok/s, loss 0.250, 0:10 elapsed, ETA 3:12"
    )
    assert printed[-2].startswith("train sft: step 99/100 (99%), 0.5 step/s")
    assert "ETA" in printed[-2] and "ETA" not in printed[-1]
    assert printed[-1].startswith("train sft: step 100/100 (100%)")


def test_finish_prints_the_last_state_of_a_long_command_only() -> None:
    clock, out = FakeClock(), io.StringIO()
    quick = ProgressLines("eval", 3, "episode", every=10, stream=out, clock=clock)
    quick.update(0)
    for _ in range(3):
        clock.now += 1
        quick.advance()
    quick.finish()
    assert out.getvalue() == ""  # a 3 s command prints nothing
    slow = ProgressLines("eval", 3, "episode", every=10, stream=out, clock=clock)
    slow.update(0)
    for _ in range(3):
        clock.now += 6
        slow.advance()
    slow.finish()
    assert _lines(out) == [
        "eval: episode 2/3 (67%), 0.167 episode/s, 0:12 elapsed, ETA 0:06",
        "eval: episode 3/3 (100%), 0.167 episode/s, 0:18 elapsed",
    ]


def test_unknown_totals_and_the_interval_variable(monkeypatch) -> None:
    clock, out = FakeClock(), io.StringIO()
    lines = ProgressLines("diagnose", None, "run", every=0, stream=out, clock=clock)
    lines.update(0)
    clock.now += 4
    lines.update(2)
    assert _lines(out) == [
        "diagnose: run 0, 0:00 elapsed",
        "diagnose: run 2, 0.5 run/s, 0:04 elapsed",
    ]
    monkeypatch.setenv(EVERY_VARIABLE, "2.5")
    assert default_every() == 2.5
    monkeypatch.setenv(EVERY_VARIABLE, "often")
    assert default_every() == 15.0
    assert clock_time(3723) == "1:02:03" and clock_time(65) == "1:05"


def test_heartbeat_reports_work_without_a_count_until_it_ends() -> None:
    stream = io.StringIO()
    with heartbeat("fork", "continuing", every=0.05, stream=stream) as now:
        time.sleep(0.3)
        now("storing")
        time.sleep(0.3)
    lines = _lines(stream)
    assert lines[0].startswith("fork: continuing, 0:00 elapsed")
    assert lines[-1].startswith("fork: storing, 0:00 elapsed")
    time.sleep(0.2)
    assert _lines(stream) == lines  # nothing once the work has ended


def test_a_fast_block_prints_no_heartbeat() -> None:
    stream = io.StringIO()
    with heartbeat("export", every=30, stream=stream):
        pass
    assert stream.getvalue() == ""
