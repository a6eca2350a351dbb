"""`trajforge export --format atif`: valid ATIF-v1.5 by the RFC's rules, and it imports back.

The rules checker is tested too: each rule of the RFC it enforces rejects a document that
breaks it (else every "valid" below would pass vacuously).
"""

from __future__ import annotations

import copy
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.export.atif import to_atif
from trajforge.export.atif_rules import atif_errors
from trajforge.importers import import_paths
from trajforge.importers.registry import importer
from trajforge.schema import Trajectory
from trajforge.store import Store

ATIF_FILES = [
    "openhands__hello-world.trajectory.json",
    "terminus_2__hello-world-context-summarization.trajectory.json",
    "terminus_2__hello-world-invalid-json.trajectory.json",
]
OTHER_FORMATS = [
    "formats/inspect",
    "formats/openhands",
    "formats/swe-agent",
    "who-and-when/Hand-Crafted-sample/19.json",
    "tau-bench/historical_trajectories/gpt-4o-airline.json",
]


@pytest.mark.parametrize("name", ATIF_FILES)
def test_atif_file_comes_back_as_it_was(name: str, shared_data: Path) -> None:
    path = shared_data / "formats" / "atif" / name
    (traj,) = importer("atif").read(path)
    original = orjson.loads(path.read_bytes())
    assert atif_errors(original) == []
    assert to_atif(traj) == original


def _projection(traj: Trajectory) -> list[tuple]:
    """What ATIF carries of the messages (a tool result's `name`, its function's, is not)."""
    return [
        (
            m.role,
            m.text(),
            None if m.role == "tool" else m.name,
            [(c.id, c.name, orjson.loads(c.arguments)) for c in m.tool_calls or []],
            m.tool_call_id,
        )
        for m in traj.messages
    ]


def _answers_its_calls(traj: Trajectory) -> bool:
    """Whether every tool message answers a call of the assistant message before it."""
    calls: set[str] = set()
    for message in traj.messages:
        if message.role == "assistant":
            calls = {c.id for c in message.tool_calls or []}
        elif message.role == "tool" and message.tool_call_id not in calls:
            return False
    return True


def test_export_of_every_format_is_valid_and_imports_back(
    shared_data: Path, tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    with Store(db) as store:
        report = import_paths(store, [str(shared_data / p) for p in OTHER_FORMATS])
        assert report.failed == []
        originals = list(store.query())
    # a run with token ids but no ATIF origin, as the proxy records them
    terminus = shared_data / "formats/atif" / ATIF_FILES[1]
    (recorded,) = importer("atif").read(terminus)
    recorded.metadata.pop("atif")
    recorded.source.format = "proxy"
    with Store(db) as store:
        store.add(recorded)
    originals.append(recorded)
    out = tmp_path / "atif"
    result = CliRunner().invoke(
        app, ["export", "--db", str(db), "--format", "atif", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    files = sorted(out.glob("*.json"))
    assert len(files) == len(originals) == 218
    for file in files:
        assert atif_errors(orjson.loads(file.read_bytes())) == [], file.name
    by_id = {t.id or t.content_id(): t for t in originals}
    strict = 0
    for file in files:
        (back,) = importer("atif").read(file)
        original = by_id[file.stem]
        assert len(back.llm_calls) <= len(original.llm_calls)
        if not _answers_its_calls(original):
            continue
        strict += 1
        assert _projection(back) == _projection(original), file.name
        ids = [(c.prompt_token_ids, c.completion_token_ids, c.logprobs) for c in back.llm_calls]
        assert ids == [
            (c.prompt_token_ids, c.completion_token_ids, c.logprobs)
            for c in original.llm_calls
            if c.message_index is not None
        ]
    assert strict == len(files) - 1  # Inspect's tool-error log has tool results without calls
    back = importer("atif").read(out / f"{recorded.id}.json")
    assert (
        next(back).llm_calls[0].completion_token_ids == recorded.llm_calls[0].completion_token_ids
    )


def test_one_file_holds_one_run(shared_data: Path, tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with Store(db) as store:
        import_paths(store, [str(shared_data / "formats/swe-agent")])
    args = ["export", "--db", str(db), "--format", "atif", "-o", str(tmp_path / "one.json")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    assert "an ATIF file holds one run and 2 are selected" in result.output


BREAKS = [
    (lambda d: d.pop("session_id"), "$: missing required field 'session_id'"),
    (lambda d: d["agent"].pop("version"), "$.agent: missing required field 'version'"),
    (lambda d: d.update(schema_version="v1"), "$.schema_version: not ATIF-vX.Y"),
    (lambda d: d.update(trajectory_id="x"), "$.trajectory_id: not a field of ATIF"),
    (lambda d: d["steps"][2].update(step_id=7), "$.steps[2].step_id: must be 3"),
    (lambda d: d["steps"][0].update(source="tool"), "$.steps[0].source: must be one of"),
    (lambda d: d["steps"][0].update(model_name="m"), "$.steps[0].model_name: only agent"),
    (lambda d: d["steps"][1].pop("message"), "$.steps[1]: missing required field 'message'"),
    (lambda d: d["steps"][1].update(timestamp="yesterday"), "$.steps[1].timestamp: not an ISO"),
    (
        lambda d: d["steps"][2]["tool_calls"][0].update(arguments="{}"),
        "$.steps[2].tool_calls[0].arguments: must be an object",
    ),
    (
        lambda d: d["steps"][2]["observation"]["results"][0].update(source_call_id="nope"),
        "$.steps[2].observation.results[0].source_call_id: 'nope' is no tool call",
    ),
    (
        lambda d: d["steps"][2]["metrics"].update(logprobs=["-0.1"]),
        "$.steps[2].metrics.logprobs: must be an array of numbers",
    ),
    (
        lambda d: d["steps"][2]["metrics"].update(prompt_token_ids=[1.5]),
        "$.steps[2].metrics.prompt_token_ids: must be an array of integers",
    ),
    (
        lambda d: d["steps"][4]["observation"]["results"][0]["subagent_trajectory_ref"][0].pop(
            "session_id"
        ),
        "subagent_trajectory_ref[0]: missing required field 'session_id'",
    ),
]


@pytest.mark.parametrize("index", range(len(BREAKS)))
def test_rules_reject_each_break(index: int, shared_data: Path) -> None:
    path = shared_data / "formats/atif" / ATIF_FILES[1]
    document = copy.deepcopy(orjson.loads(path.read_bytes()))
    document["steps"][2]["observation"]["results"][0]["source_call_id"] = "call_1_1"
    assert atif_errors(document) == []
    breaks, expected = BREAKS[index]
    breaks(document)
    errors = atif_errors(document)
    assert any(expected in error for error in errors), errors


def test_newer_atif_runs_export_as_valid_v15(shared_data: Path, tmp_path: Path) -> None:
    """A v1.7 file (a reference by trajectory_id, an embedded subagent, fields v1.5 does not
    define) and a step whose calls repeat an id still export valid."""
    parent = orjson.loads((shared_data / "formats/atif" / ATIF_FILES[1]).read_bytes())
    child = orjson.loads((shared_data / "formats/atif" / ATIF_FILES[2]).read_bytes())
    parent |= {"schema_version": "ATIF-v1.7", "trajectory_id": "root"}
    parent["final_metrics"]["total_subagent_tokens"] = 12
    parent["subagent_trajectories"] = [child | {"trajectory_id": "child-1"}]
    handoff = parent["steps"][4]["observation"]["results"][0]
    handoff["subagent_trajectory_ref"] = [{"trajectory_id": "child-1"}]
    calls = parent["steps"][1]["tool_calls"]
    calls.append(dict(calls[0]))
    path = tmp_path / "v17.json"
    path.write_bytes(orjson.dumps(parent))
    documents = [to_atif(t) for t in importer("atif").read(path)]
    assert [atif_errors(d) for d in documents] == [[], []]
    root = documents[0]
    assert root["extra"]["atif_fields"]["trajectory_id"] == "root"
    assert root["final_metrics"]["extra"]["atif_fields"] == {"total_subagent_tokens": 12}
    (ref,) = root["steps"][4]["observation"]["results"][0]["subagent_trajectory_ref"]
    assert ref["session_id"] == "child-1"
    assert [c["tool_call_id"] for c in root["steps"][1]["tool_calls"]] == ["call_0_1", "call_0_1#2"]
