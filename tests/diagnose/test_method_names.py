"""A localizer's method name is recorded as is, and an unknown one is an error."""

from __future__ import annotations

import pytest

from trajforge.diagnose.run import diagnose_run, recorded_method
from trajforge.errors import UserError
from trajforge.schema import Message, Outcome, Task, Trajectory


class _Finder:
    def __init__(self, name: str) -> None:
        self.name = name

    def localize(self, traj: Trajectory) -> None:
        return None


def _failed_run() -> Trajectory:
    return Trajectory(
        task=Task(id="t", instruction="do it"),
        messages=[Message(role="user", content="do it"), Message(role="assistant", content="no")],
        outcome=Outcome(success=False),
    ).with_id()


def test_known_method_is_recorded_as_named() -> None:
    assert diagnose_run(_failed_run(), _Finder("llm")).method == "llm"
    assert recorded_method("counterfactual") == "counterfactual"


def test_custom_method_name_is_an_error_not_heuristic() -> None:
    with pytest.raises(UserError, match=r"localizer 'my-finder'.*heuristic"):
        diagnose_run(_failed_run(), _Finder("my-finder"))
