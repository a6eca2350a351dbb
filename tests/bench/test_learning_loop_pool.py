"""The learning lab's job pool survives a worker that dies: the jobs the broken pool ran run
again one at a time, the job whose worker keeps dying is left out, and the others finish."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import orjson
import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
import learning_loop as lab


def _dying_arm(config: lab.LabConfig, seed: int, name: str) -> dict:
    """A job of no work whose worker dies: seed 0's E+R the first time, seed 1's E always."""
    once = Path(config.work) / f"{seed}-{name}"
    if (seed, name) == (0, "E+R") and not once.exists():
        once.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    if (seed, name) == (1, "E"):
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.2)
    return {"success": [True], "recovery": [False], "rows": 1, "final_loss": 0.0}


def test_a_dead_worker_costs_only_its_own_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(lab, "run_arm", _dying_arm)
    config = lab.LabConfig(work=str(tmp_path))
    partial = tmp_path / "lab.partial.json"
    results = lab.run_all(config, [0, 1], ["E", "E+R", "E+S"], 2, partial, {}, ["cmd"])
    assert sorted(results[0]) == ["E", "E+R", "E+S"]  # E+R died once, then finished
    assert sorted(results[1]) == ["E+R"]  # E always dies; E+S needs it
    printed = capsys.readouterr().out
    assert "seed 1 E: its worker died 2 times; left out" in printed
    assert "cannot start (an arm they need is missing): seed 1 E+S" in printed
    saved = orjson.loads(partial.read_bytes())
    assert sorted(saved["1"]) == ["E+R"] and saved["commands"] == ["cmd"]
