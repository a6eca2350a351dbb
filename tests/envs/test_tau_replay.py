"""Replay of the real tau-bench runs: output fidelity, outcome agreement, state rebuilding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trajforge.envs import ENVIRONMENTS, make_env
from trajforge.envs.replay import replay_many, replay_run, replay_to
from trajforge.envs.tau import TauAirlineEnv, TauEnvConfig, TauRetailEnv
from trajforge.envs.tau.db import TauDB
from trajforge.errors import UserError
from trajforge.schema import Task, ToolCall, Trajectory


def test_all_300_runs_replay_exactly_and_agree_on_outcome(tau_runs: list[Trajectory]) -> None:
    summary = replay_many(tau_runs)
    assert summary.runs == 300
    assert summary.calls > 1900
    assert summary.exact / summary.calls >= 0.99
    assert summary.outcome_agree == summary.runs
    # every remaining mismatch carries a reason (none are expected today)
    assert all(m.reason for m in summary.mismatches)


def test_recorded_rewards_are_reproduced_both_ways(tau_runs: list[Trajectory]) -> None:
    rewards = {replay_run(t).replayed_reward for t in tau_runs}
    assert rewards == {0.0, 1.0}  # both outcomes occur, so agreement is not trivial


def test_runs_cut_off_before_the_end_score_zero(tau_runs: list[Trajectory]) -> None:
    cut = [t for t in tau_runs if not t.outcome.details]  # tau-bench stored no reward info
    assert cut, "the airline file has runs that hit the step limit"
    for trajectory in cut:
        report = replay_run(trajectory)
        assert report.replayed_reward == 0.0
        assert report.outcome_agree


def test_a_changed_output_is_reported_with_its_reason(tau_runs: list[Trajectory]) -> None:
    run = next(t for t in tau_runs if t.task.environment == "tau-retail")
    tampered = run.model_copy(deep=True)
    index = next(i for i, m in enumerate(tampered.messages) if m.role == "tool")
    tampered.messages[index].content = "something else"
    report = replay_run(tampered)
    assert report.exact == report.calls - 1
    (mismatch,) = [m for m in report.mismatches if m.message_index is not None]
    assert mismatch.message_index == index
    assert "recorded 'something else'" in mismatch.reason


def test_airline_recordings_use_the_province_revision(tau_runs: list[Trajectory]) -> None:
    airline = next(
        t for t in tau_runs if t.task.environment == "tau-airline" and '"province"' in str(t)
    )
    assert make_env(airline).config.address_key == "province"
    retail = next(t for t in tau_runs if t.task.environment == "tau-retail")
    assert make_env(retail).config.address_key == "state"


@pytest.mark.parametrize("task_id", ["0", "3", "26"])
def test_gold_database_hash_equals_the_recorded_gt_data_hash(
    shared_data: Path, tau_runs: list[Trajectory], task_id: str
) -> None:
    """tau-bench stored the hash of the gold database; ours must be the same bytes."""
    records = json.loads(
        (shared_data / "tau-bench/historical_trajectories/gpt-4o-airline.json").read_text()
    )
    recorded = next(
        r["info"]["reward_info"]["info"]["gt_data_hash"]
        for r in records
        if str(r["task_id"]) == task_id and r["info"].get("reward_info")
    )
    task = next(
        t.task for t in tau_runs if t.task.environment == "tau-airline" and t.task.id == task_id
    )
    env = TauAirlineEnv(TauEnvConfig(address_key="province"))
    env.reset(task)
    gold = TauDB("airline", "province")
    for (table, key), record in env.gold.final.items():
        gold.insert(table, key, record)
    assert gold.tau_hash() == recorded


def test_replay_to_rebuilds_the_state_at_every_index(tau_runs: list[Trajectory]) -> None:
    run = next(t for t in tau_runs if t.task.environment == "tau-retail" and t.success)
    env = make_env(run)
    hashes = []
    for n in range(len(run.messages) + 1):
        replay_to(env, run, n)
        hashes.append(env.state_hash())
    writes = {
        i + 1
        for i, m in enumerate(run.messages)
        if m.role == "tool" and m.name in {t.name for t in env.tool_list if t.writes}
    }
    changes = {n for n in range(1, len(hashes)) if hashes[n] != hashes[n - 1]}
    assert changes and changes <= writes  # the state changes exactly where writes answered


def test_snapshot_restore_round_trip_leaves_the_shared_base_untouched() -> None:
    env = TauRetailEnv()
    env.reset(Task(id="t", environment="tau-retail", gold={"actions": [], "outputs": []}))
    start = env.state_hash()
    before = env.snapshot()
    order = env.db.get("orders", "#W5918442")
    result = env.step(
        ToolCall(
            id="1",
            name="cancel_pending_order",
            arguments='{"order_id": "#W5918442", "reason": "ordered by mistake"}',
        )
    )
    assert not result.error, result.content
    changed = env.snapshot()
    assert env.state_hash() != start
    env.restore(before)
    assert env.state_hash() == start
    assert env.db.get("orders", "#W5918442") is order  # the base record, never mutated
    assert order["status"] == "pending"
    env.restore(changed)
    assert (
        json.loads(
            env.step(
                ToolCall(id="2", name="get_order_details", arguments='{"order_id": "#W5918442"}')
            ).content
        )["status"]
        == "cancelled"
    )


def test_tool_errors_use_tau_bench_wording() -> None:
    env = TauAirlineEnv()
    env.reset(Task(id="t", environment="tau-airline", gold={"actions": [], "outputs": []}))
    assert env.step(ToolCall(id="1", name="nope")).content == "Unknown action nope"
    missing = env.step(ToolCall(id="2", name="get_user_details", arguments='{"user_id": "x"}'))
    assert (missing.content, missing.error) == ("Error: user not found", True)
    wrong = env.step(ToolCall(id="3", name="get_user_details", arguments='{"uid": "x"}'))
    assert wrong.error and wrong.content.startswith("Error: ")
    calc = env.step(ToolCall(id="4", name="calculate", arguments='{"expression": "(2 + 3) / 4"}'))
    assert calc.content == "1.25"


def test_a_run_of_an_unknown_environment_cannot_be_replayed() -> None:
    run = Trajectory(task=Task(id="x", environment="nowhere"))
    with pytest.raises(UserError, match="environment 'nowhere' cannot be replayed"):
        make_env(run)
    with pytest.raises(UserError, match="no replayable runs"):
        replay_many([run])


def test_both_tau_environments_are_registered() -> None:
    assert ENVIRONMENTS.get("tau-retail") is TauRetailEnv
    assert ENVIRONMENTS.get("tau-airline") is TauAirlineEnv


def test_cli_replay_json_and_refusals(shared_data: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from trajforge.cli.main import app

    db = str(tmp_path / "t.db")
    runner = CliRunner()
    retail = shared_data / "agentrx/tau-retail/tau_dataset_full.json"
    swe = (
        shared_data / "swe-bench-verified/mini-swe-agent_gemini-3-pro/trajs/astropy__astropy-13033"
    )
    assert runner.invoke(app, ["import", str(retail), str(swe), "--db", db]).exit_code == 0
    result = runner.invoke(app, ["replay", "--db", db, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["runs"], data["outcome_agree"], data["skipped"]) == (100, 100, 1)
    assert data["exact"] == data["calls"] and data["mismatches"] == []
    only_failures = json.loads(
        runner.invoke(app, ["replay", "--db", db, "--outcome", "failure", "--json"]).stdout
    )
    assert only_failures["runs"] == 27
    swe_id = json.loads(
        runner.invoke(app, ["ls", "--db", db, "--env", "swe-bench", "--json"]).stdout
    )[0]["id"]
    refused = runner.invoke(app, ["replay", swe_id, "--db", db])
    assert refused.exit_code == 1
    assert "cannot be replayed" in refused.output and len(refused.output.strip().splitlines()) == 1

    retail_id = json.loads(
        runner.invoke(app, ["ls", "--db", db, "--env", "tau-retail", "--json"]).stdout
    )[0]["id"]
    shown = runner.invoke(app, ["replay", retail_id, "--at", "4", "--db", db, "--json"])
    assert shown.exit_code == 0, shown.output
    assert set(json.loads(shown.stdout)) >= {"trajectory_id", "at", "state_hash", "distance"}
    assert runner.invoke(app, ["replay", "--at", "4", "--db", db]).exit_code == 1


def test_state_at_a_message_index(tau_runs: list[Trajectory]) -> None:
    from trajforge.envs.replay import state_at

    run = next(
        t
        for t in tau_runs
        if t.task.environment == "tau-retail" and t.success is False and t.task.gold["outputs"]
    )
    start, end = state_at(run, 0), state_at(run, len(run.messages))
    assert start["changed"] == [] and start["distance"] >= 1
    assert end["state_hash"] != start["state_hash"] or end["changed"] == []
    env = make_env(run)
    replay_to(env, run, len(run.messages))
    assert end["state_hash"] == env.state_hash()
    assert [(c["table"], c["key"]) for c in end["changed"]] == sorted(env.db.changes())
