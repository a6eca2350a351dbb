"""`trajforge diagnose`, `diagnose eval` and `diagnose views` on a store of real runs."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.store import Store, TrajectoryFilter

from .conftest import RETAIL, WHO_AND_WHEN

runner = CliRunner()


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    path = tmp_path_factory.mktemp("diagnose") / "store.db"
    who = sorted((shared_data / WHO_AND_WHEN).glob("*.json"), key=lambda p: int(p.stem))[:12]
    files = [str(shared_data / RETAIL), *map(str, who)]
    result = runner.invoke(app, ["import", *files, "--db", str(path)])
    assert result.exit_code == 0, result.output
    return path


def _diagnoses(db: Path) -> int:
    with Store(db) as store:
        return store.db.execute("SELECT COUNT(*) FROM diagnoses").fetchone()[0]


def _invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_bad_inputs_store_nothing(db: Path) -> None:
    with Store(db) as store:
        solved = store.rows()[0]
        assert solved.success  # the first retail run succeeded
        unreplayable = next(r for r in store.rows() if r.environment == "who-and-when")
    before = _diagnoses(db)
    code, out = _invoke("diagnose", "--db", str(db), "--id", solved.id)
    assert code == 1 and "nothing to diagnose" in out and "succeeded" in out
    code, out = _invoke("diagnose", "--db", str(db), "--env", "no-such-env")
    assert code == 1 and "no trajectories match" in out
    code, out = _invoke(
        "diagnose", "--db", str(db), "--method", "counterfactual", "--id", unreplayable.id
    )
    assert code == 1 and "cannot" in out and unreplayable.id[:12] in out
    code, out = _invoke("diagnose", "--db", str(db), "--method", "oracle-magic")
    assert code == 1 and "unknown diagnosis method" in out
    assert _diagnoses(db) == before


def test_diagnose_lists_and_stores(db: Path) -> None:
    code, out = _invoke("diagnose", "--db", str(db), "--env", "who-and-when", "--json")
    assert code == 0, out
    listed = orjson.loads(out)
    assert len(listed) == 12
    assert {"trajectory_id", "decisive_message", "category", "verified", "method"} <= set(listed[0])
    assert all(item["method"] == "heuristic" for item in listed)
    with Store(db) as store:
        stored = store.db.execute(
            "SELECT COUNT(*) FROM diagnoses WHERE method = 'heuristic'"
        ).fetchone()[0]
    assert stored >= 12
    code, out = _invoke("show", listed[0]["trajectory_id"], "--db", str(db))
    assert code == 0 and "diagnosis (heuristic)" in out


def test_diagnose_prints_progress_lines(db: Path) -> None:
    quick = CliRunner(env={"TRAJFORGE_PROGRESS_EVERY": "0"})
    result = quick.invoke(app, ["diagnose", "--db", str(db), "--env", "who-and-when", "--json"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("diagnose (")]
    assert [line.split(",")[0] for line in lines] == [
        f"diagnose (heuristic): run {n}/12 ({n / 12:.0%})" for n in range(13)
    ]


def test_eval_reports_accuracy_beside_baselines(db: Path) -> None:
    code, out = _invoke("diagnose", "eval", "--db", str(db), "--env", "who-and-when", "--json")
    assert code == 0, out
    report = orjson.loads(out)
    (item,) = report["datasets"]
    assert item["dataset"] == "who-and-when/algorithm-generated" and item["runs"] == 12
    # the heuristics were tuned on these runs: the figure says so
    assert item["sample"] == "in-sample" and "in-sample" in item["split"]
    scores = {key: item["scores"][key]["value"] for key in ("exact", "within1", "within3")}
    assert 0.0 <= scores["exact"] <= scores["within1"] <= scores["within3"] <= 1.0
    assert {"exact", "within1", "within3", "agent", "steps", "chosen_on"} <= set(item["baselines"])
    assert item["coverage"]["value"] == 1.0 and len(item["scores"]["exact"]["ci95"]) == 2
    assert report["verification"]["diagnosed"] == 12


def test_eval_of_a_fitted_method_is_out_of_sample(db: Path) -> None:
    args = ("diagnose", "eval", "--db", str(db), "--env", "who-and-when", "--bootstrap", "20")
    code, out = _invoke(*args, "--method", "prior", "--folds", "3", "--json")
    assert code == 0, out
    (item,) = orjson.loads(out)["datasets"]
    assert item["sample"] == "out-of-sample" and item["split"].startswith("by task: 3 folds")
    code, out = _invoke(*args, "--method", "prior", "--split", "dataset")
    assert code == 1 and "no tuning runs left" in out


def test_views_command_writes_loadable_files(db: Path, tmp_path: Path) -> None:
    for env in ("tau-retail", "who-and-when"):
        assert _invoke("diagnose", "--db", str(db), "--env", env)[0] == 0
    code, out = _invoke(
        "diagnose", "views", "--db", str(db), "--out", str(tmp_path), "--all", "--json"
    )
    assert code == 0, out
    card = orjson.loads(out)
    assert card["diagnosis_items"] >= 27 + 12
    assert (tmp_path / "recovery.jsonl").stat().st_size > 0
    code, out = _invoke("diagnose", "views", "--db", str(db), "--out", str(tmp_path), "--json")
    assert code == 0
    assert orjson.loads(out)["diagnosis_items"] == orjson.loads(out)["verified_runs"]


def test_llm_method_over_mock_server(db: Path) -> None:
    from trajforge.diagnose.judge import REPORT_TOOL
    from trajforge.models.mock_server import MockOpenAIServer

    with Store(db) as store:
        run = next(r for r in store.rows() if r.environment == "who-and-when")
    report = {"step": 0, "category": "wrong_plan", "explanation": "[0] plans badly"}
    reply = {"tool_calls": [{"name": REPORT_TOOL, "arguments": report}]}
    with MockOpenAIServer([reply]) as server:
        code, out = _invoke(
            "diagnose", "--db", str(db), "--id", run.id, "--method", "llm",
            "--base-url", server.base_url, "--llm-model", "judge", "--json",
            "--no-judge-evidence",
        )  # fmt: skip
    assert code == 0, out
    (listed,) = orjson.loads(out)
    assert (listed["decisive_message"], listed["category"], listed["method"]) == (
        0,
        "wrong_plan",
        "llm",
    )
    assert listed["verified"] is False  # no correction proposed: nothing verified


def test_limit_counts_failures_not_runs_read(db: Path) -> None:
    with Store(db) as store:
        first_two = [r.success for r in store.rows(TrajectoryFilter(environment="tau-retail"))][:2]
    assert True in first_two  # the first runs include a success, so the old order gave fewer
    code, out = _invoke(
        "diagnose", "--db", str(db), "--env", "tau-retail", "--limit", "2", "--json"
    )
    assert code == 0, out
    listed = orjson.loads(out)
    assert len(listed) == 2


def test_counterfactual_names_both_localizations(db: Path) -> None:
    """Retail run 74776b59: the agent says 11 T-shirt options at message 6 (the answer is
    10); the expert could still say 10 until the agent's last message (30). The table and
    `--json` name the point of no return and the first deviation with its correction, and
    `show` says which is which."""
    with Store(db) as store:
        run = store.get("74776b59")
    args = ("diagnose", "--db", str(db), "--method", "counterfactual", "--id", run.id)
    code, out = _invoke(*args, "--json")
    assert code == 0, out
    (listed,) = orjson.loads(out)
    assert (listed["decisive_message"], listed["point_of_no_return"]) == (30, 30)
    deviation = listed["first_deviation"]
    assert (deviation["message"], deviation["reason"], deviation["repaired"]) == (
        6,
        "wrong_statement",
        True,
    )
    assert "10 available T-shirt options" in deviation["correction"]["message"]
    assert "10" in listed["correction"]["message"] and listed["verified"] is True
    code, out = _invoke(*args)
    assert code == 0 and "no return" in out and "first dev" in out and "correction" in out
    assert "first deviation at message 6 (wrong_statement" in " ".join(out.split())
    code, out = _invoke("show", run.id, "--db", str(db))
    shown = " ".join(out.split())
    assert "point of no return: message 30" in shown
    assert "first deviation: message 6 (wrong_statement" in shown
    assert "correction there: Currently, there are 10 available" in shown


def test_trained_diagnoser_categorizes_and_verifies(db: Path, tmp_path: Path) -> None:
    """`diagnose train` then `diagnose --method trained --model-file`: the ranker names a
    message only; its diagnoses get the category and correction of that message (from the
    heuristic reading of the same message, else the oracle on forkable runs), so the
    corrections on the replayable retail failures are verified by fork. Before, every
    category was empty and nothing was verified."""
    copy = tmp_path / "store.db"
    copy.write_bytes(db.read_bytes())
    model = tmp_path / "ranker.json"
    code, out = _invoke("diagnose", "train", "--db", str(copy), "--out", str(model))
    assert code == 0, out
    args = ("diagnose", "--db", str(copy), "--method", "trained", "--model-file", str(model))
    code, out = _invoke(*args, "--env", "tau-retail", "--json")
    assert code == 0, out
    listed = orjson.loads(out)
    assert len(listed) == 27
    assert all(item["category"] and item["correction"] for item in listed)
    assert sum(item["verified"] for item in listed) == len(listed)
    code, out = _invoke(*args, "--env", "who-and-when", "--json")
    listed = orjson.loads(out)
    assert code == 0 and any(item["category"] for item in listed)
    code, out = _invoke(*args, "--env", "tau-retail")
    assert code == 0 and "27 corrections verified on the first proposal (100.0%)" in out
