"""`train sft` refuses bad rows, options, checkpoints and output paths with one error line."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from tests.train.conftest import teacher_rows
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.errors import UserError
from trajforge.train.sft import SFTConfig

SMALL_MODEL = ["--hidden", "16", "--layers", "1", "--batch-size", "2"]


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return teacher_rows(range(4))


def _write(path: Path, rows: list) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def _sft(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["train", "sft", *map(str, args)])
    return result.exit_code, result.output


def _one_error(code: int, output: str) -> str:
    """The command failed with one `error:` line and no traceback; returns that line."""
    assert code == 1, output
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    return lines[0]


def _bad_messages(row: dict) -> dict:
    return {**row, "messages": [1, "x", None]}


def _content_number(row: dict) -> dict:
    messages = [dict(m) for m in row["messages"]]
    messages[1]["content"] = 5
    return {**row, "messages": messages}


BAD_ROWS = {
    "messages [1, 'x', null]": (_bad_messages, "messages[0]: must be an object, not a number"),
    "tools a string": (lambda r: {**r, "tools": "[]"}, "tools: must be a list, not a string"),
    "tools a number": (lambda r: {**r, "tools": 5}, "tools: must be a list, not a number"),
    "content a number": (_content_number, "messages[1].content: must be a string, not a number"),
}


@pytest.mark.parametrize("case", BAD_ROWS)
def test_a_bad_row_names_the_file_the_line_and_the_field(rows, tmp_path: Path, case) -> None:
    spoil, expected = BAD_ROWS[case]
    data = _write(tmp_path / "train.jsonl", [rows[0], spoil(rows[1]), rows[2]])
    line = _one_error(*_sft("--data", data, "--out", tmp_path / "ckpt", *SMALL_MODEL))
    assert f"{data} [record line 2]: {expected}" in line
    assert not (tmp_path / "ckpt").exists()


def test_rows_given_in_python_are_checked_by_the_same_model(rows) -> None:
    from trajforge.train.sft import checked_rows

    good = [(r["messages"], r["tools"]) for r in rows]
    assert checked_rows(good) == good
    with pytest.raises(UserError, match=r"training row 1: messages\[1\].content: must be text"):
        checked_rows([good[0], (_content_number(rows[1])["messages"], [])])


BAD_OPTIONS = {
    ("--lr", "-1"): "--lr -1.0: must be greater than 0",
    ("--lr", "nan"): "--lr nan: must be a finite number",
    ("--save-every", "0"): "--save-every 0: must be greater than or equal to 1",
    ("--hidden", "0"): "--hidden 0: must be greater than or equal to 2",
    ("--hidden", "6"): "hidden 6 must be a multiple of 8 (2 x heads 4)",
    ("--layers", "0"): "--layers 0: must be greater than or equal to 1",
}


@pytest.mark.parametrize("option", BAD_OPTIONS)
def test_a_bad_option_is_refused_before_training(rows, tmp_path: Path, option) -> None:
    data = _write(tmp_path / "train.jsonl", rows)
    line = _one_error(*_sft("--data", data, "--out", tmp_path / "ckpt", *option))
    assert BAD_OPTIONS[option] in line
    assert not (tmp_path / "ckpt").exists()


def test_config_refuses_heads_that_do_not_divide_the_width() -> None:
    assert SFTConfig(hidden=16, heads=2).hidden == 16
    with pytest.raises(ValueError, match="multiple of 8"):
        SFTConfig(hidden=12, heads=4)


@pytest.fixture
def trained(rows, tmp_path: Path) -> tuple[Path, Path]:
    """A 2-step hidden-16 checkpoint and its data."""
    data = _write(tmp_path / "train.jsonl", rows)
    code, output = _sft("--data", data, "--out", tmp_path / "ckpt", "--steps", "2", *SMALL_MODEL)
    assert code == 0, output
    return data, tmp_path / "ckpt"


def test_a_truncated_resume_state_is_named(trained) -> None:
    data, ckpt = trained
    state = ckpt / "state.pt"
    os.truncate(state, state.stat().st_size // 2)
    line = _one_error(*_sft("--data", data, "--out", ckpt, "--resume", "--steps", "4",
                            *SMALL_MODEL))  # fmt: skip
    assert f"{state}: cannot be read" in line and "damaged" in line


def test_resume_refuses_other_data(rows, trained, tmp_path: Path) -> None:
    _, ckpt = trained
    other = _write(tmp_path / "other.jsonl", rows[:2])
    line = _one_error(*_sft("--data", other, "--out", ckpt, "--resume", "--steps", "4",
                            *SMALL_MODEL))  # fmt: skip
    assert "cannot resume on other data" in line and "4 rows" in line


def test_resume_refuses_a_change_of_shape(trained) -> None:
    data, ckpt = trained
    args = ["--data", data, "--out", ckpt, "--resume", "--steps", "4", "--layers", "1"]
    line = _one_error(*_sft(*args, "--hidden", "64"))
    assert "cannot resume with hidden 64: the checkpoint was trained with hidden 16" in line
    manifest = orjson.loads((ckpt / "trajforge.json").read_bytes())
    assert manifest["config"]["hidden"] == 16 and manifest["step"] == 2
    code, output = _sft(*args, "--hidden", "16", "--batch-size", "2")
    assert code == 0, output
    assert orjson.loads((ckpt / "trajforge.json").read_bytes())["step"] == 4


def test_resume_refuses_to_do_nothing(trained) -> None:
    data, ckpt = trained
    line = _one_error(*_sft("--data", data, "--out", ckpt, "--resume", "--steps", "2",
                            *SMALL_MODEL))  # fmt: skip
    assert "already trained for 2 steps; to continue, give more steps than that (not 2)" in line


def _never_trains(*args, **kwargs):
    raise AssertionError("training started")


@pytest.mark.parametrize("kind", ["file", "folder with files"])
def test_an_output_that_is_not_a_checkpoint_is_refused_before_training(
    rows, tmp_path: Path, monkeypatch, kind
) -> None:
    monkeypatch.setattr("trajforge.train.sft.train_sft", _never_trains)
    data = _write(tmp_path / "train.jsonl", rows)
    out = tmp_path / "out"
    if kind == "file":
        out.write_text("mine\n")
    else:
        out.mkdir()
        (out / "notes.txt").write_text("mine\n")
    line = _one_error(*_sft("--data", data, "--out", out, *SMALL_MODEL))
    assert str(out) in line
    assert "is a file" in line if kind == "file" else "holds files but no checkpoint" in line


def test_a_stored_run_that_cannot_be_a_row_is_named(rows, tmp_path: Path) -> None:
    from trajforge.schema import Message, Outcome, Task, ToolCall, Trajectory
    from trajforge.store import Store

    call = ToolCall(id="c1", name="go", arguments='{"target": "sofa 1"}')
    run = Trajectory(
        task=Task(id="household-d1-3", environment="household"),
        messages=[Message(role="user", content="go"), Message(role="assistant", tool_calls=[call])],
        tools=[{"type": "function", "function": "go"}],
        outcome=Outcome(success=True),
    )
    db = tmp_path / "runs.db"
    with Store(db) as store:
        store.add(run)
        stored_id = next(iter(store.rows())).id
    line = _one_error(*_sft("--db", db, "--out", tmp_path / "ckpt", *SMALL_MODEL))
    assert f"run {stored_id}: cannot be a training row: tools[0].function: must be" in line
