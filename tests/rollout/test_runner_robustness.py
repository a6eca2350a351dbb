"""Fault robustness: pass^k, recovery against fault-free twins, the CLI table."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.evaluate import BASELINE, pass_hat_k, robustness_report
from trajforge.schema import Fault, Outcome, Task, Trajectory


def test_pass_hat_k_follows_tau_bench() -> None:
    outcomes = {"a": [True, True, False], "b": [True, True, True]}
    assert pass_hat_k(outcomes, 1) == round((2 / 3 + 1) / 2, 4)
    assert pass_hat_k(outcomes, 2) == round((1 / 3 + 1) / 2, 4)
    assert pass_hat_k(outcomes, 3) == 0.5
    assert pass_hat_k({"a": [True]}, 2) is None


def _traj(task: str, sample: int, success: bool, kinds: tuple[str, ...] = ()) -> Trajectory:
    return Trajectory(
        task=Task(id=task),
        outcome=Outcome(success=success),
        faults=[Fault(message_index=3, kind=kind) for kind in kinds],
        metadata={"seed": 0, "sample": sample},
    )


def test_recovery_counts_only_episodes_whose_twin_succeeded() -> None:
    runs = {
        BASELINE: [_traj("a", 0, True), _traj("a", 1, True), _traj("b", 0, False)],
        "transient:0.5": [
            _traj("a", 0, True, ("transient",)),
            _traj("a", 1, False, ("transient", "transient")),
            _traj("b", 0, False, ("transient",)),  # its twin failed too: not a recovery case
        ],
    }
    base, faulty = robustness_report(runs)
    assert base.kinds == [] and base.success_rate == round(2 / 3, 4)
    (kind,) = faulty.kinds
    assert (kind.kind, kind.episodes, kind.faults, kind.successes) == ("transient", 3, 4, 1)
    assert kind.recovery_rate == 0.5
    assert faulty.faulted_episodes == 3


def test_cli_robustness_compares_the_same_episodes(tmp_path: Path) -> None:
    args = ["robustness", "--env", "household", "--tasks", "4", "--n", "2", "--json"]
    args += [
        "--faults",
        "persistent@go",
        "--faults",
        "transient:0.3",
        "--db",
        str(tmp_path / "r.db"),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    reports = {r["condition"]: r for r in json.loads(result.stdout)}
    assert list(reports) == ["none", "persistent@go", "transient:0.3"]
    assert all(r["episodes"] == 8 for r in reports.values())
    assert reports["persistent@go"]["success_rate"] == 0.0
    assert reports["persistent@go"]["kinds"][0]["recovery_rate"] == 0.0
    assert reports["none"]["pass_k"]["2"] is not None
    bad = CliRunner().invoke(app, ["robustness", "--env", "household", "--faults", "x:1"])
    assert bad.exit_code == 1 and "unknown fault kind 'x'" in bad.output
