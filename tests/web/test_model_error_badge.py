"""A run the model or its endpoint ended shows as a model error in the UI, never as a failure
or as an unknown outcome: in the run list, the run view, the fork tree and the live page."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from trajforge.schema import ForkParent, Message, Outcome, Task, Trajectory
from trajforge.store import Store
from trajforge.web import UiConfig, create_app


def _run(task: str, reason: str | None, success: bool | None) -> Trajectory:
    traj = Trajectory(task=Task(id=task, environment="household"))
    traj.messages = [Message(role="user", content=f"do {task}"), Message(role="assistant")]
    traj.outcome = Outcome(success=success, termination_reason=reason)  # type: ignore[arg-type]
    traj.outcome.not_judged_for_model_error()
    return traj.with_id()


def _badges(page: str) -> list[str]:
    return re.findall(r'<span class="badge (\w+)">([^<]+)</span>', page)


def test_a_model_error_run_has_its_own_badge_everywhere(tmp_path: Path) -> None:
    parent = _run("household-d1-1", "gave_up", False)
    child = _run("household-d1-1", "model_error", False)
    child.parent = ForkParent(trajectory_id=parent.id, message_index=1)
    child = Trajectory.model_validate(child.model_dump()).with_id()
    with Store(tmp_path / "ui.db") as store:
        store.add(parent)
        store.add(child)
    client = TestClient(create_app(UiConfig(db=tmp_path / "ui.db")))

    listed = _badges(client.get("/").text)
    assert ("warn", "model error") in listed and ("bad", "failure") in listed
    assert ("dim", "unknown") not in listed
    assert ("warn", "model error") in _badges(client.get(f"/runs/{child.id}").text)
    tree = client.get(f"/runs/{parent.id}/tree").text
    assert ("warn", "model error") in _badges(tree) and ("bad", "failure") in _badges(tree)
    assert ("warn", "model error") in _badges(client.get("/live").text)
