"""Each import format on small real files: detection, step mapping, gzip, streaming."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import orjson
import pytest

from trajforge.demo import sample_dir
from trajforge.importers import detect_format
from trajforge.importers.base import STREAM_THRESHOLD_ENV
from trajforge.schema import Trajectory, _with_identity

TEST_DATA = Path(__file__).parent / "data"
SAMPLE = sample_dir()
SWE_AGENT = next((TEST_DATA / "swe-agent").rglob("*.traj"))
MINI = next(SAMPLE.rglob("django__django-11163.traj.json"))
TAU_AIRLINE = SAMPLE / "tau-bench/historical_trajectories/gpt-4o-airline.json"
AGENTRX = SAMPLE / "agentrx/tau-retail/tau_dataset_full.json"
TAU2 = SAMPLE / "tau2-bench/toolorchestra_gpt-5/toolorchestra_retail_gpt-5_1trial.json"
WHO = SAMPLE / "who-and-when/Algorithm-Generated/14.json"

EXPECTED_FORMATS = {
    SWE_AGENT: "swe-agent",
    MINI: "mini-swe-agent",
    TAU_AIRLINE: "tau-bench",
    AGENTRX: "tau-bench",
    TAU2: "tau2-bench",
    WHO: "who-and-when",
}


def read_all(path: Path) -> list[Trajectory]:
    found = detect_format(path)
    assert found is not None, f"{path} not recognized"
    return list(found.read(path))


def comparable(traj: Trajectory) -> dict:
    data = traj.model_dump(exclude={"id"})
    data["source"].pop("file")
    return data


@pytest.mark.parametrize("path", list(EXPECTED_FORMATS), ids=lambda p: p.name)
def test_detects_each_format(path: Path) -> None:
    assert detect_format(path).name == EXPECTED_FORMATS[path]


def test_sample_files_that_are_not_runs_are_not_detected() -> None:
    assert detect_format(SAMPLE / "NOTICE.md") is None
    assert detect_format(TAU2.parent / "submission.json") is None


def test_swe_agent_history_and_step_mapping() -> None:
    (traj,) = read_all(SWE_AGENT)
    raw = orjson.loads(SWE_AGENT.read_bytes())
    assert len(traj.messages) == len(raw["history"])
    steps = {
        m.extra["trajectory_step"]: i for i, m in enumerate(traj.messages) if m.role == "assistant"
    }
    assert list(steps) == list(range(len(raw["trajectory"])))
    for number, index in steps.items():
        observation = traj.messages[index + 1]
        assert raw["trajectory"][number]["observation"] in observation.text()
        assert observation.tool_call_id == traj.messages[index].tool_calls[0].id
    assert traj.source.model == "claude-3-5-sonnet-20241022"
    assert traj.task.id == "marshmallow-code__marshmallow-1867"
    assert traj.outcome.termination_reason == "submitted" and traj.outcome.success is None
    assert traj.usage.total_tokens == 38214 + 1147


def test_tau2_maps_turns_tools_and_gold() -> None:
    trajs = read_all(TAU2)
    raw = orjson.loads(TAU2.read_bytes())
    assert len(trajs) == len(raw["simulations"])
    for traj, sim in zip(trajs, raw["simulations"], strict=True):
        assert traj.metadata.get("recorded_task_id", traj.task.id) == sim["task_id"]
        assert len(traj.messages) == len(sim["messages"])
        assert traj.outcome.reward == sim["reward_info"]["reward"]
        task = next(t for t in raw["tasks"] if t["id"] == traj.task.id)
        assert traj.task.gold == task["evaluation_criteria"]
        calls = {c.id for m in traj.messages for c in m.tool_calls or []}
        answers = [m.tool_call_id for m in traj.messages if m.role == "tool"]
        assert answers and set(answers) <= calls


def test_tau_bench_agentrx_keeps_its_one_based_index() -> None:
    traj = read_all(AGENTRX)[0]
    assert traj.source.model is None
    assert all(m.extra["index"] == i + 1 for i, m in enumerate(traj.messages) if "index" in m.extra)


def test_openai_chat_jsonl(tmp_path: Path) -> None:
    runs = read_all(TAU_AIRLINE)[:3]
    lines = [
        {
            "messages": [m.model_dump(exclude_none=True, exclude={"extra"}) for m in run.messages],
            "tools": [{"type": "function", "function": {"name": "book_reservation"}}],
            "task_id": run.task.id,
            "reward": run.outcome.reward,
            "split": "train",
        }
        for run in runs
    ]
    for line in lines:
        for message in line["messages"]:
            for call in message.get("tool_calls", []):
                call["function"] = {"name": call.pop("name"), "arguments": call.pop("arguments")}
    path = tmp_path / "chat.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n")
    trajs = read_all(path)
    assert detect_format(path).name == "openai-chat"
    for traj, run in zip(trajs, runs, strict=True):
        assert [m.text() for m in traj.messages] == [m.text() for m in run.messages]
        assert traj.messages[2].tool_calls == run.messages[2].tool_calls
        assert traj.outcome.success == run.outcome.success
        assert traj.metadata == {"split": "train"} and traj.tools


def test_openai_chat_without_task_id_groups_by_prompt(tmp_path: Path) -> None:
    line = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    path = tmp_path / "c.jsonl"
    path.write_bytes(orjson.dumps(line) + b"\n" + orjson.dumps(line) + b"\n")
    first, second = read_all(path)
    assert first.task.id == second.task.id and first.task.id.startswith("chat-")


def gzipped_copy(path: Path, tmp_path: Path) -> Path:
    """`path` gzipped, in a copy of its surroundings (so sidecar files are found)."""
    root = path.parents[2]
    shutil.copytree(root, tmp_path / root.name)
    copy = tmp_path / root.name / path.relative_to(root)
    gz = copy.with_name(copy.name + ".gz")
    gz.write_bytes(gzip.compress(copy.read_bytes()))
    copy.unlink()
    return gz


@pytest.mark.parametrize("path", list(EXPECTED_FORMATS), ids=lambda p: p.name)
def test_gzipped_file_reads_the_same(path: Path, tmp_path: Path) -> None:
    gz = gzipped_copy(path, tmp_path)
    assert detect_format(gz).name == EXPECTED_FORMATS[path]
    assert [comparable(t) for t in read_all(gz)] == [comparable(t) for t in read_all(path)]


@pytest.mark.parametrize("path", [TAU_AIRLINE, TAU2], ids=lambda p: p.name)
def test_streamed_parse_gives_the_same_trajectories(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = [comparable(t) for t in read_all(path)]
    gz = gzipped_copy(path, tmp_path)
    monkeypatch.setenv(STREAM_THRESHOLD_ENV, "1000")
    assert [comparable(t) for t in read_all(path)] == whole
    assert [comparable(t) for t in read_all(gz)] == whole


@pytest.mark.parametrize("path", list(EXPECTED_FORMATS), ids=lambda p: p.name)
def test_stored_document_is_the_plain_serialization(path: Path) -> None:
    for traj in read_all(path):
        anonymous = traj._anonymous()
        body = anonymous.model_dump_json().encode()
        assert _with_identity(body, anonymous, traj.source, "x") is not None, "fast path taken"
        traj_id, document = traj.identified_document()
        assert traj_id == traj.content_id()
        assert document == traj.model_copy(update={"id": traj_id}).model_dump_json().encode()


def test_mini_swe_agent_verdict_from_results_summary(tmp_path: Path) -> None:
    run = tmp_path / "run"
    instance = MINI.parent.name
    (run / "trajs" / instance).mkdir(parents=True)
    shutil.copyfile(MINI, run / "trajs" / instance / MINI.name)
    summary = {"instances": [{"instance_id": instance, "resolved": False}]}
    (run / "results_summary.json").write_bytes(orjson.dumps(summary))
    imp = detect_format(run / "trajs" / instance / MINI.name)
    assert imp.sidecars(run / "trajs" / instance / MINI.name) == [run / "results_summary.json"]
    (traj,) = read_all(run / "trajs" / instance / MINI.name)
    assert (traj.outcome.success, traj.outcome.judged_by) == (False, "swe-bench-harness")
    assert traj.source.run == "run"
