"""The harness-log formats on the real files of ../shared/data/formats: Inspect AI logs, Harbor
ATIF, OpenHands, SWE-agent 1.x; their step mappings, token ids, verdicts, newer versions and
bad input."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.errors import InputError
from trajforge.export.atif import to_atif
from trajforge.export.atif_rules import atif_errors
from trajforge.importers import import_paths
from trajforge.importers.registry import detect_format, importer
from trajforge.jsonfile import line_ranges
from trajforge.schema import Trajectory
from trajforge.store import Store


@pytest.fixture(scope="module")
def formats(shared_data: Path) -> Path:
    return shared_data / "formats"


def read(path: Path, fmt: str) -> list[Trajectory]:
    found = detect_format(path)
    assert found is not None and found.name == fmt, path
    return list(importer(fmt).read(path))


def document(traj: Trajectory) -> str:
    return traj.model_dump_json()


# Inspect AI


def test_inspect_v3_pool_refs_and_calls(formats: Path) -> None:
    path = formats / "inspect/inspect_ai__log_message_deduplication.eval"
    (traj,) = read(path, "inspect")
    with zipfile.ZipFile(path) as archive:
        summary = json.loads(archive.read("summaries.json"))[0]
        sample = json.loads(archive.read("samples/0_epoch_1.json"))
    assert len(traj.messages) == summary["message_count"] == len(sample["messages"])
    models = [e for e in sample["events"] if e["event"] == "model"]
    assert len(traj.llm_calls) == len(models)
    for call, event in zip(traj.llm_calls, models, strict=True):
        assert call.request["input_refs"] == event["input_refs"]
        produced = traj.messages[call.message_index]
        assert produced.role == "assistant"
        assert produced.extra["id"] == event["output"]["choices"][0]["message"]["id"]
    pool = traj.metadata["inspect"]["message_pool"]
    assert len(pool) == len(sample["message_pool"]) and all(isinstance(m, str) for m in pool)
    calls = {c.id for m in traj.messages for c in m.tool_calls or []}
    assert {m.tool_call_id for m in traj.messages if m.role == "tool"} <= calls
    assert traj.outcome.reward == 0.0 and traj.outcome.success is False
    assert traj.outcome.judged_by == "inspect-scorer:closeness_log"
    assert traj.task.gold == "42.7" and traj.source.model == "hardcoded/hardcoded"


def test_inspect_v2_epochs_attachments_and_usage(formats: Path) -> None:
    trajs = read(formats / "inspect/metr-inspect-action__small.eval", "inspect")
    assert sorted(t.task.data["epoch"] for t in trajs) == [1, 2, 3, 4, 5, 6]
    assert all(t.outcome.success is True and t.outcome.reward == 1.0 for t in trajs)
    for traj in trajs:
        assert "attachment://" not in document(traj)
        usage = traj.metadata["inspect"]["sample"]["model_usage"]
        (model_usage,) = usage.values()
        assert traj.usage.total_tokens == model_usage["total_tokens"]
        assert all(c.message_index is not None for c in traj.llm_calls)
        assert traj.messages[0].role == "system"


def test_inspect_json_log_score_letters(formats: Path) -> None:
    (traj,) = read(formats / "inspect/inspect_ai__log_read_sample.json", "inspect")
    assert traj.outcome.success is True and traj.outcome.reward == 1.0
    assert traj.outcome.details["reductions"][0]["answer"] == "Yes"
    assert "attachment://" not in document(traj)
    (errors,) = read(formats / "inspect/inspect_ai__log_tool_call_error.json", "inspect")
    assert [m.extra["error"]["type"] for m in errors.messages][:2] == ["parsing", "timeout"]
    assert errors.outcome.success is None  # the sample has no scores


def _rewrite_zip(source: Path, target: Path, change) -> None:
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for name in old.namelist():
            data = change(name, old.read(name))
            if data is not None:
                new.writestr(name, data)


def test_inspect_newer_version_imports_and_warns(formats: Path, tmp_path: Path) -> None:
    def newer(name: str, data: bytes) -> bytes:
        value = json.loads(data)
        if name == "header.json":
            value["version"] = 4
        if name.startswith("samples/"):
            value["branches"] = [{"from": 2}]
        return json.dumps(value).encode()

    target = tmp_path / "newer.eval"
    _rewrite_zip(formats / "inspect/inspect_ai__log_message_deduplication.eval", target, newer)
    with Store(tmp_path / "s.db") as store:
        report = import_paths(store, [str(target)])
        (result,) = report.files
        assert result.added == 1 and result.error is None
        (warning,) = result.warnings
        assert "version 4 is newer than 3" in warning and "branches" in warning
        (traj,) = store.query()
        assert traj.metadata["inspect"]["sample"]["branches"] == [{"from": 2}]
    shown = CliRunner().invoke(app, ["import", str(target), "--db", str(tmp_path / "cli.db")])
    assert shown.exit_code == 0
    assert f"warning: {target}: log format version 4 is newer than 3" in shown.output
    listed = CliRunner().invoke(
        app, ["import", str(target), "--db", str(tmp_path / "json.db"), "--json"]
    )
    assert json.loads(listed.stdout)["warnings"] == [{"path": str(target), "warning": warning}]


def test_inspect_unfinished_log_reads_the_journal(formats: Path, tmp_path: Path) -> None:
    target = tmp_path / "running.eval"
    source = formats / "inspect/inspect_ai__log_message_deduplication.eval"
    _rewrite_zip(source, target, lambda name, data: None if name == "header.json" else data)
    (traj,) = read(target, "inspect")
    assert "no header.json" in traj.metadata["import_warnings"][0]
    assert traj.source.model == "hardcoded/hardcoded"


def test_inspect_bad_sample_names_file_and_member(formats: Path, tmp_path: Path) -> None:
    target = tmp_path / "bad.eval"
    source = formats / "inspect/inspect_ai__log_message_deduplication.eval"

    def break_role(name: str, data: bytes) -> bytes:
        if not name.startswith("samples/"):
            return data
        value = json.loads(data)
        value["messages"][3]["role"] = "robot"
        return json.dumps(value).encode()

    _rewrite_zip(source, target, break_role)
    with pytest.raises(InputError) as caught:
        list(importer("inspect").read(target))
    assert str(target) in str(caught.value)
    assert "[record samples/0_epoch_1.json]" in str(caught.value)
    assert "messages[3]: role must be one of" in str(caught.value)
    target.write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(InputError, match=r"not a readable \.eval"):
        list(importer("inspect").read(target))


# Harbor ATIF

TERMINUS = "atif/terminus_2__hello-world-context-summarization.trajectory.json"
INVALID_JSON = "atif/terminus_2__hello-world-invalid-json.trajectory.json"


def test_atif_steps_token_ids_and_observations(formats: Path) -> None:
    (traj,) = read(formats / TERMINUS, "atif")
    raw = orjson.loads((formats / TERMINUS).read_bytes())
    step_messages = [m for m in traj.messages if "step_id" in m.extra]
    assert [m.extra["step_id"] for m in step_messages] == [s["step_id"] for s in raw["steps"]]
    with_metrics = [s for s in raw["steps"] if "metrics" in s]
    assert len(traj.llm_calls) == len(with_metrics) == 7
    for call, step in zip(traj.llm_calls, with_metrics, strict=True):
        assert traj.messages[call.message_index].extra["step_id"] == step["step_id"]
        assert call.prompt_token_ids == step["metrics"]["prompt_token_ids"]
        assert call.completion_token_ids == step["metrics"]["completion_token_ids"]
        assert call.logprobs == step["metrics"]["logprobs"]
    # terminal output names no call: it is what the model read next, a user message
    after_first = traj.messages[traj.llm_calls[0].message_index + 1]
    assert after_first.role == "user" and after_first.extra["observation_of_step"] == 2
    handoff = next(m for m in traj.messages if "subagent_trajectory_ref" in m.extra)
    assert len(handoff.extra["subagent_trajectory_ref"]) == 3
    assert traj.outcome.termination_reason == "submitted" and traj.outcome.success is None
    assert traj.usage.prompt_tokens == raw["final_metrics"]["total_prompt_tokens"]


def test_atif_tool_results_answer_their_calls(formats: Path) -> None:
    (traj,) = read(formats / "atif/openhands__hello-world.trajectory.json", "atif")
    tool = next(m for m in traj.messages if m.role == "tool")
    call = traj.messages[traj.messages.index(tool) - 1].tool_calls[0]
    assert tool.tool_call_id == call.id == "call_fake_1"
    assert orjson.loads(call.arguments)["path"] == "/app/hello.txt"
    assert traj.tools and traj.tools[0]["function"]["name"] == "execute_bash"


def test_atif_continuation_is_one_run(formats: Path, tmp_path: Path) -> None:
    first = orjson.loads((formats / TERMINUS).read_bytes())
    first["continued_trajectory_ref"] = "trajectory.cont-1.json"
    (tmp_path / "trajectory.json").write_bytes(orjson.dumps(first))
    shutil.copy(formats / INVALID_JSON, tmp_path / "trajectory.cont-1.json")
    with Store(tmp_path / "s.db") as store:
        report = import_paths(store, [str(tmp_path)])
        assert [f.path for f in report.files] == [str(tmp_path / "trajectory.json")]
        assert str(tmp_path / "trajectory.cont-1.json") in report.sidecars
        (traj,) = store.query()
    second = orjson.loads((formats / INVALID_JSON).read_bytes())
    start = traj.metadata["atif"]["continuations"][0]["first_message"]
    assert all(m.extra.get("segment") == 1 for m in traj.messages[start:])
    assert traj.messages[start].extra["step_id"] == second["steps"][0]["step_id"]
    assert len(traj.llm_calls) == 7 + 4 and traj.llm_calls[-1].id == "seg1-step-5"


def test_atif_harbor_trial_verdict(formats: Path, tmp_path: Path) -> None:
    agent = tmp_path / "hello-world__1" / "agent"
    agent.mkdir(parents=True)
    shutil.copy(formats / INVALID_JSON, agent / "trajectory.json")
    result = {
        "task_name": "hello-world",
        "trial_name": "hello-world__1",
        "verifier_result": {"rewards": {"reward": 1.0}},
    }
    (agent.parent / "result.json").write_text(json.dumps(result))
    with Store(tmp_path / "s.db") as store:
        report = import_paths(store, [str(tmp_path)])
        assert report.sidecars == [str(agent.parent / "result.json")]
        (traj,) = store.query()
    assert traj.outcome.success is True and traj.outcome.judged_by == "harbor-verifier"
    assert traj.task.id == "hello-world" and traj.source.run == "hello-world__1"
    (agent.parent / "result.json").unlink()
    (agent.parent / "verifier").mkdir()
    (agent.parent / "verifier" / "reward.txt").write_text("0\n")
    (traj,) = read(agent / "trajectory.json", "atif")
    assert traj.outcome.success is False and traj.outcome.reward == 0.0


def test_atif_v17_embedded_subagents_and_newer_version(formats: Path, tmp_path: Path) -> None:
    parent = orjson.loads((formats / TERMINUS).read_bytes())
    child = orjson.loads((formats / INVALID_JSON).read_bytes())
    child |= {"schema_version": "ATIF-v1.7", "trajectory_id": "child-1"}
    parent |= {"schema_version": "ATIF-v1.7", "trajectory_id": "root"}
    parent["subagent_trajectories"] = [child]
    path = tmp_path / "multi.json"
    path.write_bytes(orjson.dumps(parent))
    root, sub = read(path, "atif")
    assert root.metadata["atif"]["subagent_trajectories"] == ["child-1"]
    assert sub.metadata["atif"]["parent"]["trajectory_id"] == "root"
    assert sub.task == root.task and len(sub.llm_calls) == 4
    assert "import_warnings" not in root.metadata
    parent |= {"schema_version": "ATIF-v1.9", "judgement": {"score": 1}}
    parent["steps"][1]["cache_key"] = "x"
    path.write_bytes(orjson.dumps(parent))
    root, _ = read(path, "atif")
    (warning,) = root.metadata["import_warnings"]
    assert "ATIF-v1.9 is newer than ATIF-v1.7" in warning
    assert "judgement" in warning and "steps[].cache_key" in warning
    assert root.metadata["atif"]["judgement"] == {"score": 1}


def test_atif_bad_step_names_file_and_field(formats: Path, tmp_path: Path) -> None:
    data = orjson.loads((formats / INVALID_JSON).read_bytes())
    data["steps"][2]["source"] = "robot"
    path = tmp_path / "bad.json"
    path.write_bytes(orjson.dumps(data))
    with pytest.raises(InputError) as caught:
        list(importer("atif").read(path))
    message = str(caught.value)
    assert message.startswith(f"{path} [record $]: steps[2].source must be one of")


# OpenHands

OUTPUT = "openhands/OpenHands__multi_swe_bench_examples_output.jsonl"


def test_openhands_output_events_to_messages(formats: Path) -> None:
    trajs = read(formats / OUTPUT, "openhands")
    lines = [orjson.loads(line) for line in (formats / OUTPUT).read_bytes().splitlines()]
    assert [t.task.id for t in trajs] == [line["instance_id"] for line in lines]
    for traj, line in zip(trajs, lines, strict=True):
        seen = [e["id"] for e in traj.metadata["openhands"]["other_events"]]
        for message in traj.messages:
            seen.extend(message.extra.get("event_ids") or [message.extra["event_id"]])
        assert sorted(seen) == sorted(e["id"] for e in line["history"])
        calls = {c.id for m in traj.messages for c in m.tool_calls or []}
        answered = [m.tool_call_id for m in traj.messages if m.role == "tool"]
        assert answered and set(answered) <= calls
        responses = {
            e["tool_call_metadata"]["model_response"]["id"]
            for e in line["history"]
            if "action" in e and "tool_call_metadata" in e
        }
        assert {c.id for c in traj.llm_calls} == responses
        assert all(traj.messages[c.message_index].role == "assistant" for c in traj.llm_calls)
        assert traj.task.data["git_patch"] == line["test_result"]["git_patch"]
        assert "api_key" not in document(traj)
        assert traj.outcome.success is None
    assert [t.outcome.termination_reason for t in trajs] == ["submitted", "submitted", "max_steps"]


def test_openhands_verdict_beside_the_output(formats: Path, tmp_path: Path) -> None:
    shutil.copy(formats / OUTPUT, tmp_path / "output.jsonl")
    report = {"resolved_ids": ["ponylang__ponyc-4595"], "unresolved_ids": ["ponylang__ponyc-4593"]}
    (tmp_path / "output.report.json").write_text(json.dumps(report))
    with Store(tmp_path / "s.db") as store:
        result = import_paths(store, [str(tmp_path)])
        assert result.sidecars == [str(tmp_path / "output.report.json")]
        verdicts = {t.task.id: t.outcome.success for t in store.query()}
    assert verdicts == {
        "ponylang__ponyc-4595": True,
        "ponylang__ponyc-4593": False,
        "ponylang__ponyc-4588": None,
    }


def test_openhands_event_lists(formats: Path) -> None:
    (basic,) = read(formats / "openhands/OpenHands__tests_runtime_trajs_basic.json", "openhands")
    assert [m.role for m in basic.messages] == ["user", "assistant", "tool", "assistant"]
    assert basic.source.model == "claude-3-5-sonnet-20241022"
    (rfc,) = read(formats / "openhands/harbor-rfc__openhands_trajectory.json", "openhands")
    assert rfc.messages[0].role == "system" and rfc.tools
    assert [
        e["observation"] for e in rfc.metadata["openhands"]["other_events"] if "observation" in e
    ] == ["recall"]


def test_openhands_bad_line_names_the_line(formats: Path, tmp_path: Path) -> None:
    lines = (formats / OUTPUT).read_bytes().splitlines()
    broken = orjson.loads(lines[1])
    broken["history"] = {"not": "a list"}
    path = tmp_path / "output.jsonl"
    path.write_bytes(b"\n".join([lines[0], orjson.dumps(broken)]) + b"\n")
    with pytest.raises(InputError) as caught:
        list(importer("openhands").read(path))
    assert str(caught.value) == f"{path} [record line 2]: history: expected an array, got dict"


# SWE-agent 1.x


def test_swe_agent_last_step_beyond_history(formats: Path) -> None:
    path = formats / "swe-agent/SWE-agent__test-repo__6e44b9__sweagenttestrepo-1c2844.traj"
    (traj,) = read(path, "swe-agent")
    raw = orjson.loads(path.read_bytes())
    steps = [m for m in traj.messages if "trajectory_step" in m.extra]
    assert [m.extra["trajectory_step"] for m in steps] == list(range(len(raw["trajectory"])))
    last = steps[-1]
    assert last.extra["from_trajectory"] and last.extra["action"] == "submit"
    index = traj.messages.index(last)
    assert traj.messages[index + 1].text() == raw["trajectory"][-1]["observation"]
    assert {m.name for m in traj.messages[: len(raw["history"])]} == {"main"}
    assert traj.usage.cost == raw["info"]["model_stats"]["instance_cost"]


def test_swe_agent_retry_attempts(formats: Path, tmp_path: Path) -> None:
    path = formats / "swe-agent/SWE-agent__test-repo__6e44b9__sweagenttestrepo-1c2844.traj"
    raw = orjson.loads(path.read_bytes())
    attempt = {k: raw[k] for k in ("history", "trajectory", "info")}
    retry = {
        "attempts": [attempt, attempt],
        "info": raw["info"],
        "replay_config": raw["replay_config"],
    }
    target = tmp_path / "retry.traj"
    target.write_bytes(orjson.dumps(retry))
    (traj,) = read(target, "swe-agent")
    single = len(read(path, "swe-agent")[0].messages)
    assert len(traj.messages) == 2 * single
    assert [m.extra["attempt"] for m in traj.messages] == [0] * single + [1] * single


def test_openhands_text_actions_without_tool_calls(formats: Path, tmp_path: Path) -> None:
    """Older CodeAct histories: actions parsed from the model's text carry no tool call."""
    events = orjson.loads(
        (formats / "openhands/OpenHands__tests_runtime_trajs_basic.json").read_bytes()
    )
    for event in events:
        event.pop("tool_call_metadata", None)
    pairs = [
        [events[0], {"id": 1, "source": "user", "observation": "null", "content": "", "cause": 0}]
    ]
    pairs += [[events[1], events[2]], [events[3], {"id": 6, "observation": "null", "cause": 5}]]
    line = {"instance_id": "game-2048", "instruction": "make 2048", "history": pairs}
    line["git_patch"] = "diff --git a/game.py b/game.py"
    path = tmp_path / "output.jsonl"
    path.write_bytes(orjson.dumps(line) + b"\n")
    (traj,) = read(path, "openhands")
    assert [m.role for m in traj.messages] == ["user", "assistant", "user", "assistant"]
    assert traj.messages[2].text() == events[2]["content"]
    assert traj.messages[3].extra["action"] == "finish"
    assert [e["observation"] for e in traj.metadata["openhands"]["other_events"]] == [
        "null",
        "null",
    ]
    assert traj.task.data["git_patch"].startswith("diff --git")
    assert traj.outcome.termination_reason == "submitted"


def test_openhands_event_list_read_in_parts_is_one_run(formats: Path) -> None:
    """Workers cut a big file into line ranges; an event list is still one run."""
    path = formats / "openhands/harbor-rfc__openhands_trajectory.json"
    parts = line_ranges(path, 4096)
    assert len(parts) > 1
    runs = [t for part in parts for t in importer("openhands").read_lines(path, part)]
    assert len(runs) == 1 and len(runs[0].messages) == 5


def test_atif_v16_content_parts(formats: Path, tmp_path: Path) -> None:
    data = orjson.loads((formats / INVALID_JSON).read_bytes())
    data["schema_version"] = "ATIF-v1.6"
    parts = [{"type": "text", "text": "Look:"}, {"type": "image", "source": {"path": "a.png"}}]
    data["steps"][0]["message"] = parts
    data["steps"][1]["observation"]["results"][0]["content"] = parts[:1]
    path = tmp_path / "v16.json"
    path.write_bytes(orjson.dumps(data))
    (traj,) = read(path, "atif")
    assert traj.messages[0].content == parts and traj.messages[0].text() == "Look:\n"
    assert traj.messages[2].content == parts[:1]
    assert "import_warnings" not in traj.metadata
    exported = to_atif(traj)
    assert atif_errors(exported) == []
    assert exported["steps"][0]["message"] == "Look:\n"
    assert exported["steps"][0]["extra"]["content_parts"] == parts


def test_runs_that_failed_before_their_first_event(formats: Path, tmp_path: Path) -> None:
    """An OpenHands instance with no history, an Inspect sample with no messages: the run is
    the task it was given (a run of no messages is refused, and would fail the whole file)."""
    line = orjson.loads((formats / OUTPUT).read_bytes().splitlines()[2])
    line["history"] = []
    path = tmp_path / "output.jsonl"
    path.write_bytes(orjson.dumps(line) + b"\n")
    (traj,) = read(path, "openhands")
    assert [m.role for m in traj.messages] == ["user"] and traj.messages[0].extra[
        "from_instruction"
    ]
    assert traj.outcome.termination_reason == "max_steps"
    log = orjson.loads((formats / "inspect/inspect_ai__log_read_sample.json").read_bytes())
    log["samples"][0]["messages"] = []
    path = tmp_path / "log.json"
    path.write_bytes(orjson.dumps(log))
    (sample,) = read(path, "inspect")
    assert sample.messages[0].text() == log["samples"][0]["input"]


def test_atif_bad_metrics_name_the_step(formats: Path, tmp_path: Path) -> None:
    data = orjson.loads((formats / INVALID_JSON).read_bytes())
    data["steps"][2]["metrics"]["cost_usd"] = "cheap"
    path = tmp_path / "bad.json"
    path.write_bytes(orjson.dumps(data))
    with pytest.raises(InputError) as caught:
        list(importer("atif").read(path))
    assert str(caught.value).endswith(
        "[record $]: step 3 metrics: cost_usd must be a number, got 'cheap'"
    )


def test_inspect_older_sample_layout(formats: Path, tmp_path: Path) -> None:
    """Older logs: events and attachments under `transcript`, one `score`."""
    log = orjson.loads((formats / "inspect/inspect_ai__log_read_sample.json").read_bytes())
    sample = log["samples"][0]
    current = read(formats / "inspect/inspect_ai__log_read_sample.json", "inspect")[0]
    sample["transcript"] = {"events": sample.pop("events"), "content": sample.pop("attachments")}
    sample["score"] = sample.pop("scores")["match"]
    path = tmp_path / "old.json"
    path.write_bytes(orjson.dumps(log))
    (traj,) = read(path, "inspect")
    assert traj.outcome.success is True and "attachment://" not in document(traj)
    assert len(traj.llm_calls) == len(current.llm_calls) == 1
    assert traj.metadata["inspect"]["events"] == current.metadata["inspect"]["events"]


def test_openhands_line_longer_than_the_head(formats: Path, tmp_path: Path) -> None:
    line = orjson.loads((formats / OUTPUT).read_bytes().splitlines()[0])
    first = {"instance_id": line["instance_id"], "instruction": line["instruction"] * 40}
    path = tmp_path / "output.jsonl"
    path.write_bytes(orjson.dumps(first | line | {"instruction": first["instruction"]}) + b"\n")
    assert path.read_bytes().index(b'"history"') > 65536
    (traj,) = read(path, "openhands")
    assert traj.task.id == line["instance_id"]


def test_atif_embedded_subagent_without_version(formats: Path, tmp_path: Path) -> None:
    parent = orjson.loads((formats / TERMINUS).read_bytes())
    parent |= {"schema_version": "ATIF-v1.7", "trajectory_id": "root"}
    parent["subagent_trajectories"] = [
        {"trajectory_id": "s", "steps": [{"source": "agent", "message": "Summary."}]}
    ]
    path = tmp_path / "v17.json"
    path.write_bytes(orjson.dumps(parent))
    _, sub = read(path, "atif")
    assert "import_warnings" not in sub.metadata and sub.messages[0].text() == "Summary."
