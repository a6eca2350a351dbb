"""`trajforge monitor train | eval | score` on the real tau-bench runs."""

from __future__ import annotations

import orjson
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.schema import Message, Task, Trajectory
from trajforge.store import Store

runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, ["monitor", *args])


def test_train_eval_and_score_from_the_command_line(monitor_db, tau_trajs, tmp_path):
    model = tmp_path / "tau.model"
    db = ["--db", str(monitor_db), "--harness", "tau-bench"]
    trained = _run("train", "--out", str(model), *db, "--json")
    assert trained.exit_code == 0, trained.output
    assert orjson.loads(trained.stdout)["runs"] == 300

    evaluated = _run("eval", "--monitor", str(model), *db, "--json", "--bootstrap", "20")
    assert evaluated.exit_code == 0, evaluated.output
    summary = orjson.loads(evaluated.stdout)
    assert summary["runs"] == 300
    assert summary["sample"].startswith("in-sample")  # the model's own training runs
    assert set(summary["auroc_at_step"]) == {"10", "20", "30", "40"}
    assert set(summary["tokens_saved_at_loss"]) == {"0.01", "0.05"}
    assert set(summary["successful_stopped_at_loss"]) == {"0.01", "0.05"}

    traj = tau_trajs[0]
    scored = _run("score", traj.id, "--monitor", str(model), "--db", str(monitor_db), "--json")
    assert scored.exit_code == 0, scored.output
    curve = orjson.loads(scored.stdout)["risk"]
    assert [index for index, _ in curve] == traj.assistant_indices()
    table = _run("score", traj.id[:10], "--monitor", str(model), "--db", str(monitor_db))
    assert table.exit_code == 0 and "learned risk" in table.stdout
    shown = runner.invoke(app, ["show", traj.id, "--db", str(monitor_db), "--risk", str(model)])
    assert shown.exit_code == 0, shown.output
    assert "learned risk" in shown.stdout


def test_cross_validated_eval_prints_the_required_keys(monitor_db):
    args = ["--db", str(monitor_db), "--env", "tau-retail", "--json", "--bootstrap", "0"]
    result = _run("eval", *args, "--folds", "3", "--no-baselines")
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert summary["runs"] == 100 and summary["folds"] == 3
    assert summary["sample"].startswith("out-of-sample")
    assert all(0 <= v <= 1 for v in summary["tokens_saved_at_loss"].values())
    ceiling = summary["headroom"]
    assert 0 <= ceiling["hindsight_auroc"] <= 1
    assert set(ceiling["perfect_tokens_saved_at_step"]) == {"5", "10", "20"}


def test_cross_validation_prints_progress_lines(monitor_db):
    args = ["eval", "--db", str(monitor_db), "--env", "tau-retail", "--json", "--bootstrap", "0"]
    args += ["--folds", "2"]
    result = CliRunner(env={"TRAJFORGE_PROGRESS_EVERY": "0"}).invoke(app, ["monitor", *args])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    reading = [line for line in lines if line.startswith("monitor eval: reading: run ")]
    assert reading[0].startswith("monitor eval: reading: run 0/100 (0%)")
    assert reading[-1].startswith("monitor eval: reading: run 100/100 (100%), ")
    stages = [line for line in lines if line.startswith("monitor eval: evaluating: stage ")]
    assert [line.split(",")[0] for line in stages] == [
        f"monitor eval: evaluating: stage {n}/7 ({n / 7:.0%})" for n in range(8)
    ]
    assert "fitting rule" in stages[-2] and "ETA" in stages[-2]


def test_bad_model_file_and_empty_run_are_one_line_errors(monitor_db, tmp_path):
    bad = tmp_path / "bad.model"
    bad.write_text("hello")
    result = _run("eval", "--monitor", str(bad), "--db", str(monitor_db), "--env", "tau-retail")
    assert result.exit_code == 1
    assert "not a trajforge monitor model file" in result.output

    db = tmp_path / "empty.db"
    with Store(db) as store:
        store.add(Trajectory(task=Task(id="t"), messages=[Message(role="user", content="hi")]))
        traj_id = next(iter(store.rows())).id
    result = _run("score", traj_id, "--db", str(db))
    assert result.exit_code == 1
    assert "no agent steps" in result.output


def test_saved_model_on_unseen_tasks_is_out_of_sample(monitor_db, tmp_path):
    model = tmp_path / "retail.model"
    args = ["--out", str(model), "--db", str(monitor_db), "--env", "tau-retail"]
    trained = _run("train", *args, "--detector", "length")  # any detector: the split is tested
    assert trained.exit_code == 0, trained.output
    args = ["--monitor", str(model), "--db", str(monitor_db), "--json", "--bootstrap", "0"]
    result = _run("eval", *args, "--harness", "tau-bench")
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert summary["sample"].startswith("out-of-sample")
    assert summary["runs"] == 200 and summary["in_sample"]["runs"] == 100
