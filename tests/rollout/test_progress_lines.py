"""`rollout` reports progress lines on stderr (here a pipe, not a terminal)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.models.mock_server import MockOpenAIServer


def test_an_llm_rollout_prints_progress_lines_and_resumes_counting(tmp_path: Path) -> None:
    runner = CliRunner(env={"TRAJFORGE_PROGRESS_EVERY": "0"})
    db = str(tmp_path / "r.db")
    with MockOpenAIServer() as server:
        args = ["rollout", "--env", "household", "--tasks", "3", "--policy", "llm",
                "--base-url", server.base_url, "--llm-model", "m", "--max-steps", "2",
                "--db", db, "--json"]  # fmt: skip
        first = runner.invoke(app, args)
        assert first.exit_code == 0, first.output
        again = runner.invoke(app, [*args[:4], "4", *args[5:]])
        assert again.exit_code == 0, again.output
    assert json.loads(first.stdout)["episodes"] == 3
    lines = [line for line in first.stderr.splitlines() if line.startswith("household · llm:")]
    assert [line.split(",")[0] for line in lines] == [
        f"household · llm: episode {n}/3 ({n / 3:.0%})" for n in range(4)
    ]
    assert "running " in lines[1] and "success 0%" in lines[1] and " tok/s" in lines[1]
    assert any("ETA" in line for line in lines)
    resumed = [line for line in again.stderr.splitlines() if line.startswith("household")]
    assert resumed[0].startswith("household · llm (3 done before): episode 3/4 (75%)")


def test_handoff_and_replay_print_progress_lines(tmp_path: Path) -> None:
    runner = CliRunner(env={"TRAJFORGE_PROGRESS_EVERY": "0"})
    args = ["handoff", "--env", "tau-retail", "--reacher", "expert", "--reacher",
            "noisy-expert", "--solver", "expert", "--k", "1", "--tasks", "2", "--json"]  # fmt: skip
    handoff = runner.invoke(app, args)
    assert handoff.exit_code == 0, handoff.output
    lines = [line for line in handoff.stderr.splitlines() if line.startswith("handoff ")]
    assert [line.split(",")[0] for line in lines] == [
        f"handoff tau-retail: handoff {n}/4 ({n / 4:.0%})" for n in range(5)
    ]
    db = str(tmp_path / "runs.db")
    stored = runner.invoke(app, ["rollout", "--env", "tau-retail", "--tasks", "3", "--db", db])
    assert stored.exit_code == 0, stored.output
    replayed = runner.invoke(app, ["replay", "--env", "tau-retail", "--db", db, "--json"])
    assert replayed.exit_code == 0, replayed.output
    lines = [line for line in replayed.stderr.splitlines() if line.startswith("replay: ")]
    assert lines[0].startswith("replay: run 0/3 (0%)") and lines[-1].startswith("replay: run 3/3")
