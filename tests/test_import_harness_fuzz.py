"""Seeded mutations of the real harness-log files (Inspect, ATIF, OpenHands, SWE-agent 1.x):
each import is valid or one clean error line naming the file, never a traceback, and a
rejected file adds nothing."""

from __future__ import annotations

import json
import random
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.json_paths import json_paths

from trajforge.errors import UserError
from trajforge.importers import import_paths
from trajforge.store import Store

SEED = 2828
CASES = 30
VALUES: list[Any] = [None, 0, -1, 2.5, "x", [], {}, [1, "a"], {"k": 1}, True, "attachment://zz"]


def _seeds(formats: Path) -> dict[str, tuple[str, Any]]:
    """format -> (file name, parsed content) of a small real file."""
    output = (formats / "openhands/OpenHands__multi_swe_bench_examples_output.jsonl").read_bytes()
    line = orjson.loads(output.splitlines()[0])
    line["history"] = line["history"][:12]
    with zipfile.ZipFile(formats / "inspect/inspect_ai__log_message_deduplication.eval") as z:
        sample = json.loads(z.read("samples/0_epoch_1.json"))
        header = json.loads(z.read("header.json"))
    sample["events"] = sample["events"][:20]
    return {
        "atif": (
            "t.json",
            _load(formats / "atif/terminus_2__hello-world-invalid-json.trajectory.json"),
        ),
        "inspect-json": ("log.json", _load(formats / "inspect/inspect_ai__log_read_sample.json")),
        "inspect-eval": ("log.eval", {"header": header, "sample": sample}),
        "openhands-jsonl": ("output.jsonl", line),
        "openhands-events": (
            "t.json",
            _load(formats / "openhands/OpenHands__tests_runtime_trajs_basic.json"),
        ),
        "swe-agent": (
            "run.traj",
            _load(formats / "swe-agent/SWE-agent__test-repo__6e44b9__sweagenttestrepo-1c2844.traj"),
        ),
    }


def _load(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def _retype(rng: random.Random, doc: Any) -> None:
    path = rng.choice(json_paths(doc, 3000))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = rng.choice(VALUES)


def _delete(rng: random.Random, doc: Any) -> None:
    path = rng.choice(json_paths(doc, 3000))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]


def _write(name: str, doc: Any, folder: Path) -> Path:
    path = folder / name
    if name.endswith(".eval"):
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("header.json", json.dumps(doc["header"]))
            archive.writestr("samples/0_epoch_1.json", json.dumps(doc["sample"]))
    elif name.endswith(".jsonl"):
        path.write_text(json.dumps(doc) + "\n")
    else:
        path.write_text(json.dumps(doc))
    return path


def _truncate(rng: random.Random, path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: rng.randrange(len(data))])


Mutation = Callable[[random.Random, Any], None]


@pytest.mark.parametrize(
    "fmt",
    ["atif", "inspect-json", "inspect-eval", "openhands-jsonl", "openhands-events", "swe-agent"],
)
def test_mutated_files_import_or_fail_cleanly(fmt: str, shared_data: Path, tmp_path: Path) -> None:
    name, seed = _seeds(shared_data / "formats")[fmt]
    rng = random.Random(f"{SEED}-{fmt}")
    outcomes: dict[str, int] = {"imported": 0, "failed": 0}
    for case in range(CASES):
        doc = json.loads(json.dumps(seed))
        folder = tmp_path / str(case)
        folder.mkdir()
        kind = case % 3
        if kind < 2:
            for _ in range(rng.randint(1, 3)):
                (_retype if kind == 0 else _delete)(rng, doc)
        path = _write(name, doc, folder)
        if kind == 2:
            _truncate(rng, path)
        with Store(folder / "s.db") as store:
            try:
                report = import_paths(store, [str(path)])
            except UserError as exc:  # no longer recognized: one line naming the file
                assert str(path) in str(exc) and "\n" not in str(exc)
                outcomes["failed"] += 1
                continue
            (result,) = report.files
            if result.error:
                assert str(path) in result.error and "\n" not in result.error, result.error
                assert store.count() == 0
                outcomes["failed"] += 1
            else:
                assert store.count() == result.added
                outcomes["imported"] += 1
    print(fmt, outcomes)
    assert outcomes["imported"] and outcomes["failed"]
