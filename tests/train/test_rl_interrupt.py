"""A failed or interrupted rollout batch stops at once, not after the episodes in flight."""

from __future__ import annotations

import threading

import pytest

from trajforge.train.rl import rollouts


def test_a_failed_episode_stops_the_batch_without_waiting(monkeypatch) -> None:
    started, released = threading.Event(), threading.Event()
    finished: list[str] = []

    def roll_out(rollout: str) -> str:
        if rollout == "slow":
            started.set()
            released.wait(timeout=30)
            finished.append(rollout)
            return rollout
        started.wait(timeout=30)  # the slow one is in flight when this one fails
        raise KeyboardInterrupt

    monkeypatch.setattr(rollouts, "roll_out", roll_out)
    try:
        with pytest.raises(KeyboardInterrupt):
            rollouts._in_threads(["slow", "fails", "never"], concurrency=2, on_episode=None)
        assert started.is_set() and finished == []  # returned while "slow" was still running
    finally:
        released.set()
