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
