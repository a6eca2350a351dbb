"""Checkpoint handoff on the tau task sets: REACH / SOLVE with expert and noisy reachers."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from trajforge.agents import ExpertPolicy
from trajforge.agents.user_sim import ScriptedUser
from trajforge.cli.main import app
from trajforge.envs import make_env
from trajforge.envs.replay import replay_to
from trajforge.envs.tau import bundled_tasks
from trajforge.rollout.factory import AgentSpec, PolicyOptions
from trajforge.rollout.handoff import (
    HandoffConfig,
    agent_factory,
    evaluate_handoff,
    run_handoff,
    run_matrix,
)


def _agents(policy: str, **options):
    return agent_factory(AgentSpec(policy=policy, options=PolicyOptions(**options)))


@pytest.mark.parametrize("env_name", ["tau-retail", "tau-airline"])
def test_expert_reacher_and_solver_reach_and_solve_everything(env_name: str) -> None:
    tasks = list(bundled_tasks(env_name))
    result = evaluate_handoff(
        env_name, tasks, _agents("expert"), _agents("expert"), HandoffConfig(k=1)
    )
    assert (result.reach, result.solve, result.end_to_end) == (1.0, 1.0, 1.0)
    assert all(
        r.distance_at_handoff is not None and r.distance_at_handoff <= 1 for r in result.runs
    )


def test_a_noisy_reacher_reaches_less_often() -> None:
    tasks = list(bundled_tasks("tau-retail"))[:40]
    config = HandoffConfig(k=1)
    noisy = evaluate_handoff(
        "tau-retail", tasks, _agents("noisy-expert", error_rate=0.5), _agents("expert"), config
    )
    assert 0.0 < noisy.reach < 1.0
    assert noisy.solve == 1.0  # the expert solves from every state the reacher reached
    assert noisy.end_to_end == pytest.approx(noisy.reach)


def test_the_solver_starts_from_the_reachers_exact_state() -> None:
    task = next(t for t in bundled_tasks("tau-airline") if len(t.gold["actions"]) >= 4)
    agents = (ExpertPolicy(), ScriptedUser())
    run, reached, solved = run_handoff(
        "tau-airline", task, agents, (ExpertPolicy(), ScriptedUser()), HandoffConfig(k=1)
    )
    assert run.reached and run.solved
    at = run.handoff_index
    assert solved.messages[:at] == reached.messages[:at]
    assert reached.outcome.termination_reason == "handoff"
    env = make_env(reached)
    replay_to(env, reached, at)
    assert run.state_hash == env.state_hash()  # the solver's env: the reacher's state


def test_fixed_step_handoff() -> None:
    tasks = list(bundled_tasks("tau-retail"))[:10]
    result = evaluate_handoff(
        "tau-retail", tasks, _agents("expert"), _agents("expert"), HandoffConfig(at=2)
    )
    assert result.reach == 1.0 and result.solve == 1.0
    assert all(r.handoff_index is not None for r in result.runs)


def test_matrix_over_several_reachers_and_solvers() -> None:
    specs = {
        name: AgentSpec(policy=name, options=PolicyOptions(error_rate=0.6))
        for name in ("expert", "noisy-expert")
    }
    matrix = run_matrix(
        "tau-airline",
        ["expert", "noisy-expert"],
        ["expert", "noisy-expert"],
        specs,
        HandoffConfig(k=1),
        count=12,
    )
    assert len(matrix.results) == 4
    assert matrix.cell("expert", "expert").end_to_end == 1.0
    assert matrix.cell("noisy-expert", "expert").reach < 1.0
    data = matrix.to_json()
    assert "reach" not in data and len(data["matrix"]) == 4
    assert set(data["matrix"][0]) >= {"reacher", "solver", "reach", "solve", "end_to_end"}


def test_cli_handoff_json() -> None:
    args = [
        "handoff",
        "--env",
        "tau-retail",
        "--reacher",
        "expert",
        "--solver",
        "expert",
        "--k",
        "1",
        "--tasks",
        "5",
        "--json",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["reach"], data["solve"], data["end_to_end"], data["tasks"]) == (1.0, 1.0, 1.0, 5)
    table = CliRunner().invoke(app, args[:-1], terminal_width=120)
    assert "REACH / SOLVE" in table.stdout and "1.00 / 1.00 / 1.00" in table.stdout


def test_cli_handoff_refuses_the_replay_policy() -> None:
    result = CliRunner().invoke(
        app, ["handoff", "--env", "tau-retail", "--reacher", "replay", "--solver", "expert"]
    )
    assert result.exit_code == 1
    assert "use it with fork" in result.output


def test_cli_handoff_save_stores_reacher_and_solver_runs(tmp_path) -> None:
    from trajforge.store import Store

    db = str(tmp_path / "h.db")
    args = [
        "handoff",
        "--env",
        "tau-airline",
        "--reacher",
        "expert",
        "--solver",
        "expert",
        "--tasks",
        "3",
        "--save",
        "--db",
        db,
        "--json",
    ]
    assert CliRunner().invoke(app, args).exit_code == 0
    with Store(db) as store:
        runs = list(store.query())
    reachers = {t.id: t for t in runs if t.source.run == "reacher"}
    solvers = [t for t in runs if t.source.run == "solver"]
    assert len(reachers) == len(solvers) == 3
    for solver in solvers:
        reacher = reachers[solver.parent.trajectory_id]
        at = solver.parent.message_index
        assert solver.messages[:at] == reacher.messages[:at] and solver.success
