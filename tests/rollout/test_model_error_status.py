"""A run that ended because the model or its endpoint could not be reached is not a failure
of the agent: status `model_error` everywhere, out of failure counts, diagnoses and training
data, and a command whose every run ended that way fails with one `error:` line."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.demo import sample_dir
from trajforge.export.rl import _reward
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.monitor.dataset import featurize_runs
from trajforge.schema import Message, Outcome, Task, Trajectory
from trajforge.store import Store, TrajectoryFilter
from trajforge.store.migrations import m010_model_errors_not_judged
from trajforge.train.evaluate import EvalConfig, _report

REFUSED = {"status": 400, "error": "bad request"}


def invoke(*args: str, code: int = 0):
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, result.output
    return result


def error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


@pytest.fixture
def sample_db(tmp_path: Path) -> Path:
    db = tmp_path / "s.db"
    invoke("import", str(sample_dir()), "--db", str(db))
    return db


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once the socket is closed


def _failed_retail_run(db: Path) -> str:
    with Store(db) as store:
        flt = TrajectoryFilter(environment="tau-retail", success=False, limit=1)
        return store.rows(flt)[0].id


def test_a_fork_with_no_server_fails_and_its_child_is_a_model_error_everywhere(
    sample_db: Path,
) -> None:
    db = str(sample_db)
    port = _closed_port()
    parent = _failed_retail_run(sample_db)
    url = f"http://127.0.0.1:{port}/v1"
    result = invoke("fork", parent, "--at", "6", "--policy", "llm", "--base-url", url,
                    "--llm-model", "m", "--db", db, "--json", code=1)  # fmt: skip
    assert f"127.0.0.1:{port}" in error_line(result)
    child = json.loads(result.stdout)
    assert child["status"] == "model_error" and child["success"] is None

    failures = json.loads(invoke("ls", "--outcome", "failure", "--json", "--db", db).stdout)
    assert child["id"] not in {r["id"] for r in failures}
    (listed,) = json.loads(invoke("ls", "--outcome", "model_error", "--json", "--db", db).stdout)
    assert listed["id"] == child["id"] and listed["status"] == "model_error"
    assert "model error" in invoke("ls", "--outcome", "model_error", "--db", db).stdout
    assert "model error" in invoke("show", child["id"], "--db", db).stdout
    stats = json.loads(invoke("stats", "--json", "--db", db).stdout)
    assert stats["model_errors"] == 1 and stats["judged"] == stats["total"] - 1

    refused = invoke("diagnose", "--id", child["id"], "--db", db, code=1)
    assert "model_error, not a failure" in error_line(refused)


def test_a_model_error_an_older_version_stored_as_a_failure_loads_unjudged(
    tmp_path: Path,
) -> None:
    old = Trajectory(task=Task(id="t", environment="household"))
    old.outcome = Outcome(success=True, termination_reason="model_error")
    document = orjson.loads(old.model_dump_json())
    document["outcome"]["success"] = False  # as versions before the status wrote it
    loaded = Trajectory.model_validate(document)
    assert loaded.outcome.success is None and loaded.outcome.status == "model_error"
    assert orjson.loads(loaded.model_dump_json())["outcome"]["success"] is False  # unchanged

    with Store(tmp_path / "old.db") as store:
        store.add(loaded)
        store.db.execute("UPDATE trajectories SET success = 0")  # the row an old version wrote
        m010_model_errors_not_judged(store.db)
        assert store.rows(TrajectoryFilter(success=False)) == []
        (row,) = store.rows(TrajectoryFilter(model_error=True))
    assert row.status == "model_error"


def _run(status: str, steps: int = 3) -> Trajectory:
    traj = Trajectory(task=Task(id=f"household-d1-{status}", environment="household"))
    traj.messages = [Message(role="assistant", content=f"step {i}") for i in range(steps)]
    traj.outcome = Outcome(success=status == "success", reward=float(status == "success"))
    if status == "model_error":  # as the episode loop ends such a run
        traj.outcome.termination_reason = "model_error"
        traj.outcome.not_judged_for_model_error()
    return Trajectory.model_validate(traj.model_dump())


def test_model_errors_stay_out_of_monitor_training_rl_rewards_and_eval_rates() -> None:
    runs = [_run("success"), _run("failure"), _run("model_error")]
    assert runs[2].outcome.details["env_success"] is False
    assert {r.traj_id for r in featurize_runs(runs)} == {runs[0].id, runs[1].id}
    assert [_reward(r) for r in runs] == [1.0, 0.0, None]
    report = _report("p", EvalConfig(tasks=3, recovery=0), runs, [])
    assert report["success"]["n"] == 2 and report["model_errors"] == 1


def test_eval_of_an_unreachable_policy_fails_after_the_first_episode() -> None:
    with MockOpenAIServer([REFUSED] * 10) as server:
        result = invoke("eval", "--policy", "llm", "--base-url", server.base_url,
                        "--llm-model", "m", "--tasks", "5", "--recovery", "0", code=1)  # fmt: skip
        assert len(server.requests) == 3  # one episode's retries, then it stopped
    assert server.base_url in error_line(result)


def test_recover_with_an_unreachable_teacher_and_user_says_so_in_one_line(
    sample_db: Path, tmp_path: Path
) -> None:
    with MockOpenAIServer([REFUSED] * 400) as server:
        result = invoke("recover", "--env", "tau2-retail", "--teacher", "llm", "--user", "llm",
                        "--base-url", server.base_url, "--llm-model", "m", "--limit", "1",
                        "--out", str(tmp_path / "rec"), "--db", str(sample_db), code=1)  # fmt: skip
    assert "teacher run" in error_line(result) and server.base_url in error_line(result)


def test_diagnose_with_an_unreachable_judge_fails_and_stores_nothing(sample_db: Path) -> None:
    with MockOpenAIServer([REFUSED] * 30) as server:
        args = ["--llm-model", "m", "--limit", "1", "--db", str(sample_db)]
        result = invoke("diagnose", "--method", "llm", "--base-url", server.base_url, *args, code=1)
    assert server.base_url in error_line(result)
    with Store(sample_db) as store:
        assert store.db.execute("SELECT count(*) FROM diagnoses").fetchone()[0] == 0


def test_rl_rollouts_count_model_errors_apart_from_unrecorded_episodes() -> None:
    from trajforge.train.rl.rollouts import Episode, _stats

    episodes = [
        Episode("s1", "g", _run("failure"), None),
        Episode("s2", "g", _run("model_error"), None),
    ]
    row = _stats(episodes, 1.0).as_row()
    assert row["unrecorded_episodes"] == 1 and row["model_error_episodes"] == 1


def test_handoff_with_an_unreachable_reacher_fails_after_the_first_run() -> None:
    with MockOpenAIServer([REFUSED] * 30) as server:
        result = invoke("handoff", "--env", "tau-retail", "--reacher", "llm", "--solver", "expert",
                        "--base-url", server.base_url, "--llm-model", "m", "--tasks", "4",
                        "--at", "2", code=1)  # fmt: skip
        assert len(server.requests) == 3
    assert "first handoff run" in error_line(result) and server.base_url in error_line(result)


def test_rft_with_an_unreachable_policy_keeps_nothing_and_says_why(tmp_path: Path) -> None:
    with MockOpenAIServer([REFUSED] * 30) as server:
        result = invoke("rft", "--env", "household", "--tasks", "1", "--k", "2", "--policy", "llm",
                        "--base-url", server.base_url, "--llm-model", "m", "--max-steps", "2",
                        "--out", str(tmp_path / "rft"), "--db", str(tmp_path / "r.db"), "--json",
                        code=1)  # fmt: skip
    assert "all 2 sampled rollouts" in error_line(result)
    assert not (tmp_path / "rft" / "train.jsonl").exists()


def test_rl_advantages_leave_model_errors_out_of_the_group_baseline() -> None:
    from trajforge.train.rl.advantages import advantage_signal, training_sequences
    from trajforge.train.rl.config import RLConfig
    from trajforge.train.rl.loop import _judged_means
    from trajforge.train.rl.rollouts import Episode

    sample = {"prompt_ids": [1], "completion_ids": [2, 3], "loss_mask": [1, 1],
              "logprobs": [-0.1, -0.2], "reward": 0.0, "call_ids": ["c"]}  # fmt: skip
    episodes = [
        Episode("s1", "g", _run("success"), None, [dict(sample)]),
        Episode("s2", "g", _run("failure"), None, [dict(sample)]),
        Episode("s3", "g", _run("model_error"), None),
    ]
    won, lost = training_sequences(episodes, RLConfig(reward="outcome"))
    # a group of one success and one failure: +1 and -1 (with the model error as a third
    # member counted as a failure they would be +1.41 and -0.71)
    assert abs(won.advantages[-1] - 1.0) < 1e-3 and abs(lost.advantages[-1] + 1.0) < 1e-3
    assert advantage_signal(episodes, [won, lost])["zero_variance_groups"] == 0.0
    assert _judged_means(episodes) == {"reward": 0.5, "success": 0.5}
    assert _judged_means(episodes[2:]) == {"reward": None, "success": None}
