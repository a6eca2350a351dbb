"""The command line on the bundled sample: import, ls, show, stats, export, schema, errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.demo import sample_dir
from trajforge.store import Store

SAMPLE = sample_dir()
WHO_DIR = SAMPLE / "who-and-when"


def cli(*args: str) -> subprocess.CompletedProcess:
    """The real `trajforge` command in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "trajforge", *args], capture_output=True, text=True, timeout=120
    )


def invoke(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("cli") / "sample.db"
    invoke("import", str(SAMPLE), "--db", str(db))
    return db


def test_ls_and_stats_search_the_runs_text(sample_db: Path) -> None:
    db = str(sample_db)
    found = json.loads(invoke("ls", "--db", db, "--json", "--search", '"cancel reservation"'))
    everything = json.loads(invoke("ls", "--db", db, "--json"))
    assert 0 < len(found) < len(everything)
    with Store(sample_db) as store:
        texts = {row.id: store.get(row.id).model_dump_json().lower() for row in store.rows()}
    assert {row["id"] for row in found} <= {i for i, text in texts.items() if "cancel" in text}
    failures = json.loads(
        invoke("stats", "--db", db, "--json", "--search", "cancel*", "--outcome", "failure")
    )
    assert 0 < failures["total"] < len(everything)
    result = CliRunner().invoke(app, ["ls", "--db", db, "--search", "cancel AND"])
    assert result.exit_code == 1
    assert result.output.startswith("error: search query 'cancel AND' is not valid")


def test_import_summary_json_and_second_import(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    first = json.loads(invoke("import", str(SAMPLE), "--db", db, "--json"))
    assert first["imported"] == 34 and first["failed"] == []
    assert first["by_format"]["who-and-when"] == 5
    assert first["not_trajectories"] == [str(SAMPLE / "NOTICE.md")]
    assert any(p.endswith("submission.json") for p in first["sidecars"])
    second = json.loads(invoke("import", str(SAMPLE), "--db", db, "--json"))
    assert (second["imported"], second["duplicates"]) == (0, 34)


def test_import_text_summary_groups_skipped_files(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    (notes / "deeper").mkdir(parents=True)
    for name in ("a.txt", "b.md", "deeper/c.csv"):
        (notes / name).write_text("not a run")
    args = ["import", str(WHO_DIR), str(notes), "--db", str(tmp_path / "t.db")]
    result = CliRunner().invoke(app, args, terminal_width=200)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith("imported 5 trajectories from 5 files (5 who-and-when)")
    assert "skipped 0 as duplicates" in lines[0]
    assert lines[1].startswith("skipped 3 files that are not trajectories")
    assert lines[2:] == [f"  {notes}/ (2)", f"  {notes / 'deeper'}/ (1)"]


def test_import_shows_progress_while_it_finds_the_formats(tmp_path: Path) -> None:
    """Every file given or found in a folder is counted as its format is decided."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("not a run")
    single = sorted(WHO_DIR.rglob("*.json"))[0]
    args = ["import", str(WHO_DIR), str(notes), str(single), "--db", str(tmp_path / "t.db")]
    result = CliRunner(env={"TRAJFORGE_PROGRESS_EVERY": "0"}).invoke(app, args)
    assert result.exit_code == 0, result.output
    found = [line for line in result.stderr.splitlines() if "finding formats" in line]
    files = len([p for p in WHO_DIR.rglob("*") if p.is_file()]) + 2
    assert found and found[-1].startswith(f"import: finding formats: file {files}/{files} (100%)")


def test_model_and_run_overrides(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    agentrx = str(SAMPLE / "agentrx")
    invoke("import", agentrx, "--db", db, "--model", "gpt-4o", "--run", "agentrx")
    rows = json.loads(invoke("ls", "--db", db, "--json"))
    assert {(r["model"], r["run"]) for r in rows} == {("gpt-4o", "agentrx")}


def test_ls_json_fields_and_filters(sample_db: Path) -> None:
    rows = json.loads(invoke("ls", "--db", str(sample_db), "--json"))
    assert len(rows) == 34
    for key in ("id", "source", "model", "environment", "task_id", "success"):
        assert all(key in row for row in rows)
    failed = json.loads(
        invoke(
            "ls", "--db", str(sample_db), "--json", "--env", "tau2-retail", "--outcome", "failure"
        )
    )
    assert len(failed) == 2 and all(r["success"] is False for r in failed)


def test_stats_json(sample_db: Path) -> None:
    stats = json.loads(invoke("stats", "--db", str(sample_db), "--json"))
    assert stats["total"] == 34 and stats["successes"] == 15
    sources = {g["name"]: (g["total"], g["successes"]) for g in stats["by_source"]}
    assert sources == {
        "tau-bench": (16, 8),
        "tau2-bench": (8, 4),
        "mini-swe-agent": (5, 3),
        "captain-agent": (5, 0),
    }
    assert {g["name"] for g in stats["by_model"]} >= {"gpt-4o", "gpt-5"}
    assert {g["name"] for g in stats["by_environment"]} >= {"tau2-airline", "who-and-when"}
    assert stats["steps"]["count"] == 34 and stats["tokens"]["count"] == 5


def test_show_renders_label_at_its_message(sample_db: Path) -> None:
    with Store(sample_db) as store:
        (row,) = [r for r in store.rows() if r.task_id and store.get(r.id).labels][:1]
        traj = store.get(row.id)
    label = traj.labels[0]
    out = CliRunner().invoke(app, ["show", row.id[:10], "--db", str(sample_db)], terminal_width=200)
    assert out.exit_code == 0
    text = out.stdout
    header = f"[{label.message_index}] {traj.messages[label.message_index].role}"
    next_header = f"[{label.message_index + 1}] "
    block = text[text.index(header) : text.index(next_header, text.index(header))]
    assert f"⚑ human label (agent {label.agent}" in block
    assert json.loads(invoke("show", row.id, "--db", str(sample_db), "--json")) == traj.model_dump(
        mode="json"
    )


def test_schema_prints_json_schema() -> None:
    schema = json.loads(invoke("schema"))
    assert schema["title"] == "Trajectory" and "messages" in schema["properties"]


def test_truncated_file_one_line_error_store_unchanged(tmp_path: Path, sample_db: Path) -> None:
    db = tmp_path / "t.db"
    invoke("import", str(WHO_DIR), "--db", str(db))
    before = Store(db).rows()
    source = SAMPLE / "tau-bench/historical_trajectories/gpt-4o-airline.json"
    bad = tmp_path / source.name
    bad.write_bytes(source.read_bytes()[:5000])
    result = cli("import", str(bad), "--db", str(db))
    assert result.returncode == 1
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 1 and str(bad) in errors[0] and "malformed JSON" in errors[0]
    assert Store(db).rows() == before
    assert "imported 0 trajectories from 1 file (1 failed);" in result.stdout


def test_unknown_format_one_line_error_store_unchanged(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    invoke("import", str(WHO_DIR), "--db", str(db))
    before = Store(db).rows()
    odd = tmp_path / "notes.json"
    odd.write_text('{"hello": "world"}')
    result = cli("import", str(odd), "--db", str(db))
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert str(odd) in line and "unrecognized format" in line and "who-and-when" in line
    assert Store(db).rows() == before


def test_import_glob(tmp_path: Path) -> None:
    pattern = str(WHO_DIR / "*" / "1*.json")
    summary = json.loads(invoke("import", pattern, "--db", str(tmp_path / "t.db"), "--json"))
    assert summary["imported"] == 2 and summary["by_format"] == {"who-and-when": 2}


def test_unreadable_file_in_a_folder_fails_alone(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    shutil.copytree(WHO_DIR, folder)
    broken = folder / "Algorithm-Generated" / "broken.json.gz"
    broken.write_bytes(b"this is not gzip")
    result = CliRunner().invoke(app, ["import", str(folder), "--db", str(tmp_path / "t.db")])
    assert result.exit_code == 1
    assert "imported 5 trajectories" in result.stdout
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {broken}: cannot read file")


def test_export_command_jsonl_and_parquet(sample_db: Path, tmp_path: Path) -> None:
    db = str(sample_db)
    out = tmp_path / "failures.jsonl"
    written = invoke("export", "-o", str(out), "--outcome", "failure", "--db", db)
    assert "wrote 19 trajectories" in written
    parquet = tmp_path / "tau.parquet"
    invoke("export", "-o", str(parquet), "-f", "parquet", "--harness", "tau-bench", "--db", db)
    assert pq.read_table(parquet).num_rows == 16
    again = str(tmp_path / "again.db")
    assert json.loads(invoke("import", str(out), "--db", again, "--json"))["imported"] == 19
    result = CliRunner().invoke(app, ["export", "-o", str(out), "-f", "csv", "--db", db])
    assert result.exit_code == 1 and "unknown export format 'csv'" in result.stderr


def test_show_header_leaves_out_what_is_unknown(sample_db: Path) -> None:
    with Store(sample_db) as store:
        row = next(r for r in store.rows() if r.model is None and r.total_tokens is None)
    out = CliRunner().invoke(app, ["show", row.id, "--db", str(sample_db)], terminal_width=200)
    assert out.exit_code == 0
    header = out.stdout.split("[0]")[0]
    assert "?" not in header and "tokens" not in header and row.id in header


def test_rule_policy_rollout_has_unknown_not_zero_tokens() -> None:
    from trajforge.envs.household import HouseholdEnv
    from trajforge.rollout.runner import RolloutConfig, run_episode_spec

    config = RolloutConfig(env="household", tasks=HouseholdEnv().tasks(1), policy="expert")
    traj = run_episode_spec(config.specs()[0])
    assert traj.llm_calls == [] and traj.usage.total_tokens is None
