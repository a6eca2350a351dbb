"""Import -> export -> import of the harness-log formats keeps every field the file carries.

For each real file of ../shared/data/formats: every value in the file (each string, number
and boolean, at any depth) is somewhere in the imported runs (in the schema's fields or in
`extra` / `metadata`), and the runs exported as trajforge JSONL import back unchanged.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from trajforge.export import export
from trajforge.importers import import_paths
from trajforge.store import Store

FILES = [
    "inspect/inspect_ai__log_message_deduplication.eval",
    "inspect/metr-inspect-action__small.eval",
    "inspect/inspect_ai__log_read_sample.json",
    "inspect/inspect_ai__log_tool_call_error.json",
    "atif/openhands__hello-world.trajectory.json",
    "atif/terminus_2__hello-world-context-summarization.trajectory.json",
    "atif/terminus_2__hello-world-invalid-json.trajectory.json",
    "openhands/OpenHands__multi_swe_bench_examples_output.jsonl",
    "openhands/OpenHands__tests_runtime_trajs_basic.json",
    "openhands/harbor-rfc__openhands_trajectory.json",
    "swe-agent/SWE-agent__demo_function_calling_replace__marshmallow-1867.traj",
    "swe-agent/SWE-agent__test-repo__6e44b9__sweagenttestrepo-1c2844.traj",
]

# Values that become structure rather than data: an ATIF step's source (the role), an
# Inspect model event's kind (an LLMCall).
MAPPED = {("source", "agent"), ("source", "user"), ("source", "system"), ("event", "model")}


def _documents(path: Path) -> list[object]:
    if path.suffix == ".eval":  # summaries.json and _journal/ repeat the samples, thinned
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.startswith("samples/")]
            return [json.loads(archive.read(n)) for n in ["header.json", *names]]
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [json.loads(path.read_text())]


def _leaves(value: object, key: str = "") -> Iterator[tuple[str, object]]:
    """(key, value) of every string, number and boolean in a JSON value; JSON text inside a
    string (tool-call arguments) is looked into too."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, str(k))
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item, key)
    elif isinstance(value, str):
        yield key, value
        if value[:1] in ("{", "["):
            yield from _leaves(_parsed(value), key)
    elif value is not None:
        yield key, value


def _parsed(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _dropped_on_purpose(key: str, value: object) -> bool:
    """Inspect's attachment:// references (replaced by the attachment), SWE-agent's `query`
    of each step (the whole prompt again), credentials (already masked by OpenHands)."""
    if isinstance(value, str) and value.startswith("attachment://"):
        return True
    return key in {"api_key", "query"} or (key, value) in MAPPED


@pytest.mark.parametrize("name", FILES, ids=lambda n: n.split("/")[-1][:40])
def test_every_value_is_kept_and_the_export_imports_back(
    name: str, shared_data: Path, tmp_path: Path
) -> None:
    path = shared_data / "formats" / name
    with Store(tmp_path / "first.db") as store:
        report = import_paths(store, [str(path)])
        assert report.failed == [] and report.added >= 1
        runs = {t.id: t for t in store.query()}
        export("jsonl", store, tmp_path / "runs.jsonl")
    kept = {_comparable(v) for t in runs.values() for _, v in _leaves(t.model_dump(mode="json"))}
    missing = {
        (key, _short(value))
        for document in _documents(path)
        for key, value in _leaves(document)
        if _comparable(value) not in kept and not _dropped_on_purpose(key, value)
    }
    assert not missing, f"values of {name} not kept: {sorted(missing)[:10]}"
    with Store(tmp_path / "second.db") as again:
        back = import_paths(again, [str(tmp_path / "runs.jsonl")])
        assert back.added == len(runs)
        for traj in again.query():
            original = runs[traj.id]
            assert traj.model_dump(exclude={"source"}) == original.model_dump(exclude={"source"})
            assert traj.source.format == original.source.format


def _comparable(value: object) -> object:
    """Values compared as JSON writes them (1 and 1.0, True and 1 kept apart)."""
    return (type(value).__name__ == "bool", json.dumps(value))


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."
