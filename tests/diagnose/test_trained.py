"""The trained step ranker on counterfactual-labelled noisy-expert failures (household)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.diagnose.eval import reference_label
from trajforge.diagnose.holdout import task_key
from trajforge.diagnose.localize import HeuristicLocalizer
from trajforge.diagnose.synthetic import SyntheticConfig, counterfactual_labels, synthetic_failures
from trajforge.diagnose.trained import (
    TrainedLocalizer,
    fit_ranker,
    load_ranker,
    save_ranker,
)
from trajforge.errors import UserError
from trajforge.schema import Trajectory

runner = CliRunner()


@pytest.fixture(scope="module")
def household() -> list[Trajectory]:
    config = SyntheticConfig(environment="household", failures=90, error_rate=0.3)
    return counterfactual_labels(synthetic_failures(config))


def _exact(localizer, runs: list[Trajectory]) -> float:
    hits = 0
    for traj in runs:
        found = localizer.localize(traj)
        hits += found is not None and found.step == reference_label(traj).message_index
    return hits / len(runs)


def test_labels_are_the_counterfactual_decisive_step(household: list[Trajectory]) -> None:
    assert len(household) >= 60
    for traj in household[:10]:
        (label,) = traj.labels
        assert label.source == "oracle" and label.message_index in traj.assistant_indices()
        assert label.message_index in traj.metadata["deliberate_errors"]


def test_ranker_beats_the_heuristic_on_held_out_tasks(household: list[Trajectory]) -> None:
    tasks = sorted({task_key(t) for t in household})
    held_out = set(tasks[::3])
    train = [t for t in household if task_key(t) not in held_out]
    test = [t for t in household if task_key(t) in held_out]
    trained = TrainedLocalizer(fit_ranker(train))
    assert not held_out & trained.tuned_tasks
    before, after = _exact(HeuristicLocalizer(), test), _exact(trained, test)
    assert after >= before + 0.15, (before, after)
    found = trained.localize(test[0])
    assert found is not None and 0 < (found.confidence or 0) <= 1


def test_model_file_round_trip_and_version_check(household, tmp_path: Path) -> None:
    model = fit_ranker(household[:30])
    path = tmp_path / "ranker.json"
    save_ranker(model, path)
    assert load_ranker(path) == model
    stale = orjson.loads(path.read_bytes()) | {"feature_version": "steps-v0"}
    path.write_bytes(orjson.dumps(stale))
    with pytest.raises(UserError, match=r"feature set 'steps-v0'.*retrain"):
        load_ranker(path)
    path.write_text("{}")
    with pytest.raises(UserError, match="not a diagnoser model file"):
        load_ranker(path)


def test_synthesize_train_eval_from_the_command_line(tmp_path: Path) -> None:
    db, model = str(tmp_path / "s.db"), str(tmp_path / "m.json")
    made = runner.invoke(
        app, ["diagnose", "synthesize", "--env", "household", "--failures", "30", "--db", db,
              "--error-rate", "0.3", "--json"],
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    assert orjson.loads(made.stdout)["failures"] >= 25
    untrained = runner.invoke(app, ["diagnose", "--db", db, "--method", "trained"])
    assert untrained.exit_code == 1 and "diagnose train" in untrained.output
    trained = runner.invoke(app, ["diagnose", "train", "--db", db, "--out", model])
    assert trained.exit_code == 0, trained.output
    args = ["diagnose", "eval", "--db", db, "--bootstrap", "20", "--json"]
    saved = runner.invoke(app, [*args, "--method", "trained", "--model-file", model])
    assert saved.exit_code == 0, saved.output
    (item,) = orjson.loads(saved.stdout)["datasets"]
    assert item["sample"] == "in-sample"  # every run is a training run of the model file
    refit = runner.invoke(app, [*args, "--method", "trained", "--folds", "2"])
    (item,) = orjson.loads(refit.stdout)["datasets"]
    assert item["sample"] == "out-of-sample" and item["scores"]["exact"]["n"] >= 25
    used = runner.invoke(app, ["diagnose", "--db", db, "--model-file", model, "--json"])
    assert used.exit_code == 0, used.output
    listed = orjson.loads(used.stdout)
    assert {d["method"] for d in listed} <= {"trained", "calibrated"}  # calibrated: abstained
    assert all(d["confidence"] is not None for d in listed)
    assert orjson.loads(Path(model).read_bytes())["calibration"]["priors"]


def test_calibrated_ranker_abstains_below_its_tuned_threshold(household) -> None:
    from trajforge.diagnose.calibrated import calibrated_trained

    fitted = calibrated_trained().fit(household[:60])
    found = [fitted.localize(t) for t in household[60:]]
    assert all(d is not None and d.confidence is not None for d in found)
    abstained = [d for d in found if d.abstained]
    kept = [d for d in found if not d.abstained]
    assert kept and all(d.method == "trained" for d in kept)
    assert all(
        d.method == "calibrated" and d.details["abstained_from"] == "trained" for d in abstained
    )
    assert all(d.confidence >= d.details["threshold"] for d in kept)  # type: ignore[operator]
