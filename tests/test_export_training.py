"""`export --format sft|openai`: training data from a store query; OpenAI's rules checked."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from trajforge.agents.expert import ExpertPolicy, NoisyExpertPolicy
from trajforge.cli.main import app
from trajforge.diagnose.heuristics import localize_heuristic
from trajforge.diagnose.model import Verification
from trajforge.diagnose.storage import save_diagnoses
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.export.openai_check import OpenAIFormatError, check_openai_file, check_openai_line
from trajforge.generate.rows import labelled_mistakes, validate_row
from trajforge.importers.tau_bench import TauBenchImporter
from trajforge.rollout.episode import Limits, run_episode
from trajforge.store import Store

AIRLINE = "tau-bench/historical_trajectories/gpt-4o-airline.json"


def _household(count: int) -> list:
    runs = [run_episode(HouseholdEnv(), ExpertPolicy(), task_for(0, 1))]
    for seed in range(1, count):
        policy = NoisyExpertPolicy(seed=seed, error_rate=0.3)
        runs.append(
            run_episode(HouseholdEnv(), policy, task_for(seed, 1), limits=Limits(max_steps=30))
        )
    return runs


@pytest.fixture
def db(tmp_path: Path, shared_data: Path) -> Path:
    """Household successes and failures, and tau-airline failures, one with a verified
    diagnosis whose correction is a tool call."""
    path = tmp_path / "runs.db"
    airline = [t.with_id() for t in TauBenchImporter().read(shared_data / AIRLINE)]
    failures = [t for t in airline if not t.outcome.success][:4]
    diagnoses = []
    for traj in failures:
        diagnosis = localize_heuristic(traj)
        correction = diagnosis.correction if diagnosis and diagnosis.step is not None else None
        if diagnosis and correction and correction.tool_call is not None and not diagnoses:
            diagnosis.verification = Verification(method="fork", verified=True)
            diagnoses.append(diagnosis.with_id())
    assert diagnoses
    with Store(path) as store:
        store.add_many(_household(8) + failures)
        save_diagnoses(store, diagnoses)
    return path


def _run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_export_sft_writes_successes_and_verified_recoveries(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "sft.jsonl"
    result = _run("export", "--db", str(db), "--format", "sft", "-o", str(out))
    assert result.exit_code == 0, result.output
    files = sorted(tmp_path.glob("sft.*.jsonl"))
    assert [f.name for f in files] == ["sft.messages.jsonl", "sft.prompt-completion.jsonl"]
    assert "sft.messages.jsonl" in result.output and "training rows" in result.output
    rows = [orjson.loads(line) for f in files for line in f.read_bytes().splitlines()]
    assert all(validate_row(row) for row in rows)
    with Store(db) as store:
        runs = {t.id: t for t in store.query()}
    recoveries = [r for r in rows if r["kind"] == "recovery"]
    assert len(recoveries) == 1 and recoveries[0]["verified"] is True
    assert runs[recoveries[0]["run_id"]].outcome.success is False
    assert recoveries[0]["prompt"][-1]["role"] == "user"  # the feedback, never a system message
    for row in rows:
        assert not set(row["learned"]) & labelled_mistakes(runs[row["run_id"]])
    successes = {r["run_id"] for r in rows if r["kind"] == "success"}
    assert successes == {t.id for t in runs.values() if t.outcome.success}


def test_export_openai_lines_follow_openai_rules(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "openai.jsonl"
    result = _run("export", "--db", str(db), "--format", "openai", "-o", str(out))
    assert result.exit_code == 0, result.output
    count = check_openai_file(out)
    provenance = [
        orjson.loads(x) for x in (tmp_path / "openai.provenance.jsonl").read_bytes().splitlines()
    ]
    assert len(provenance) == count and [p["line"] for p in provenance] == list(range(1, count + 1))
    with Store(db) as store:
        runs = {t.id: t for t in store.query()}
    for line, source in zip(out.read_bytes().splitlines(), provenance, strict=True):
        messages = orjson.loads(line)["messages"]
        weights = {i: m["weight"] for i, m in enumerate(messages) if m["role"] == "assistant"}
        shift = 1 if source["feedback"] else 0  # the feedback message comes before the step
        assert {i for i, w in weights.items() if w == 1} == {i + shift for i in source["learned"]}
        assert not set(source["learned"]) & labelled_mistakes(runs[source["run_id"]])
        assert all("weight" not in m for m in messages if m["role"] != "assistant")
    assert any(p["kind"] == "recovery" for p in provenance)
    assert any(p["masked"] for p in provenance)  # a noisy success: its mistakes weighted 0


def test_export_sft_with_nothing_to_learn_is_one_error(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "none.jsonl"
    result = _run(
        "export", "--db", str(db), "--format", "sft", "--env", "tau-retail", "-o", str(out)
    )
    assert result.exit_code == 1
    assert result.output.startswith("error: no training data: none of the 0 selected runs")
    assert not list(tmp_path.glob("none*"))


def test_schema_training_prints_each_form() -> None:
    result = _run("schema", "--training")
    assert result.exit_code == 0
    schemas = orjson.loads(result.stdout)
    assert set(schemas) == {"messages", "prompt-completion", "preference"}
    assert {"run_id", "learned", "prompt_end"} <= set(schemas["prompt-completion"]["properties"])


GOOD = {
    "messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": None, "weight": 0, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "content": "r", "tool_call_id": "c1"},
        {"role": "assistant", "content": "done", "weight": 1},
    ],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
}  # fmt: skip


def _broken(path: tuple, value) -> dict:
    line = orjson.loads(orjson.dumps(GOOD))
    target = line
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return line


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("messages", 1, "weight"), 0, "not allowed on user"),
        (("messages", 4, "weight"), 2, "weight must be 0 or 1"),
        (("messages", 1, "role"), "developer", "role must be one of"),
        (("messages", 2, "tool_calls", 0, "function", "arguments"), {}, "string of JSON"),
        (("messages", 2, "tool_calls", 0, "function", "arguments"), "{", "not valid JSON"),
        (("messages", 3, "tool_call_id"), "c9", "answers no earlier tool call"),
        (("messages", 4, "content"), None, "content must be a string"),
        (("messages", 4, "weight"), 0, "no assistant message to learn"),
        (("tools", 0, "type"), "code", "expected type 'function'"),
        (("provenance",), {}, "unknown keys"),
    ],
)
def test_the_openai_check_names_each_broken_rule(path: tuple, value, message: str) -> None:
    check_openai_line(GOOD, "good")
    with pytest.raises(OpenAIFormatError, match=message):
        check_openai_line(_broken(path, value), "line 1")
