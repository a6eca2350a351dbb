"""Seeded fuzzing of every import format: mutations of real files give one clean error line or
a valid import, never a traceback, and a rejected file never changes the store.

Each format starts from a small real file (cut to a few runs or messages to stay fast); the
mutations are truncation, byte flips, a value of another type, a deleted key, a huge string,
deep nesting, bad encodings, and empty or special files; a quarter of the cases are written
gzipped, half of those with their compressed stream damaged. Some cases run with the streaming
parser forced on. The counts are printed (run with -s to see them).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.json_paths import json_paths

from trajforge.demo import sample_dir
from trajforge.errors import UserError
from trajforge.importers import import_paths
from trajforge.importers.base import STREAM_THRESHOLD_ENV
from trajforge.store import Store

SEED = int(os.environ.get("TRAJFORGE_FUZZ_SEED", "1212"))
"""The fuzz seed; TRAJFORGE_FUZZ_SEED runs other cases (4711 and 90210 pass too)."""
CASES_PER_FORMAT = 36
SAMPLE = sample_dir()
TEST_DATA = Path(__file__).parent / "data"
MAX_ERROR = 1000
TYPE_POOL: list[Any] = [None, 0, -1, 1.5, "x", "false", [], {}, [1, "a"], {"k": 1}, True, 10**30]


def _cut(data: Any, **limits: int) -> Any:
    for key, n in limits.items():
        data[key] = data[key][:n]
    return data


def _seeds(shared_data: Path) -> dict[str, tuple[str, bytes]]:
    """format -> (file name, content) of a small real file."""
    who = orjson.loads((SAMPLE / "who-and-when/Algorithm-Generated/14.json").read_bytes())
    hand = orjson.loads((shared_data / "who-and-when/Hand-Crafted-sample/19.json").read_bytes())
    hand["history"] = hand["history"][:55]
    tau = orjson.loads(
        (SAMPLE / "tau-bench/historical_trajectories/gpt-4o-airline.json").read_bytes()
    )
    tau2_path = SAMPLE / "tau2-bench/toolorchestra_gpt-5/toolorchestra_retail_gpt-5_1trial.json"
    tau2 = _cut(orjson.loads(tau2_path.read_bytes()), simulations=2)
    mini_path = next(SAMPLE.rglob("django__django-11163.traj.json"))
    mini = _cut(orjson.loads(mini_path.read_bytes()), messages=10)
    swe_path = next((TEST_DATA / "swe-agent").rglob("*.traj"))
    swe = orjson.loads(swe_path.read_bytes())
    chat = [{"messages": run["traj"][:6]} for run in tau[:3]]
    with Store(":memory:") as store:
        import_paths(store, [str(SAMPLE / "who-and-when/Algorithm-Generated/1.json")])
        native = b"".join(t.model_dump_json().encode() + b"\n" for t in store.query())
    return {
        "who-and-when": ("14.json", orjson.dumps(who)),
        "who-and-when-hand-crafted": ("19.json", orjson.dumps(hand)),
        "tau-bench": ("runs.json", orjson.dumps(tau[:2])),
        "tau2-bench": ("sims.json", orjson.dumps(tau2)),
        "mini-swe-agent": ("x.traj.json", orjson.dumps(mini)),
        "swe-agent": ("x.traj", orjson.dumps(swe)),
        "openai-chat": ("chat.jsonl", b"".join(orjson.dumps(r) + b"\n" for r in chat)),
        "trajforge": ("native.jsonl", native),
    }


def _set(value: Any, path: tuple, new: Any) -> None:
    for key in path[:-1]:
        value = value[key]
    value[path[-1]] = new


def _delete(value: Any, path: tuple) -> None:
    for key in path[:-1]:
        value = value[key]
    del value[path[-1]]


def _structured(content: bytes, jsonl: bool) -> list[Any]:
    if jsonl:
        return [orjson.loads(line) for line in content.splitlines() if line.strip()]
    return [orjson.loads(content)]


def _dump(docs: list[Any], jsonl: bool) -> bytes:
    """JSON text of the documents (the standard encoder: orjson refuses deep nesting)."""
    if jsonl:
        return b"".join(_text(d) + b"\n" for d in docs)
    return _text(docs[0])


def _text(doc: Any) -> bytes:
    return json.dumps(doc, ensure_ascii=False).encode()


Mutation = Callable[[random.Random, bytes, bool], bytes]


def truncate(rng: random.Random, content: bytes, jsonl: bool) -> bytes:
    return content[: rng.randrange(len(content))]


def flip_bytes(rng: random.Random, content: bytes, jsonl: bool) -> bytes:
    data = bytearray(content)
    for _ in range(rng.randint(1, 6)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


def _edit(edit: Callable[[random.Random, Any, tuple], None]) -> Mutation:
    def mutate(rng: random.Random, content: bytes, jsonl: bool) -> bytes:
        docs = _structured(content, jsonl)
        doc = rng.choice(docs)
        paths = json_paths(doc, 5000)
        if paths:
            # A depth first, then a path of that depth: the few top-level keys, which decide
            # what a file is, are edited as often as the many deep ones.
            depth = rng.randint(1, min(4, max(len(p) for p in paths)))
            path = rng.choice([p for p in paths if len(p) == depth] or paths)
            edit(rng, doc, path)
        return _dump(docs, jsonl)

    mutate.__name__ = edit.__name__
    return mutate


@_edit
def change_type(rng: random.Random, doc: Any, path: tuple) -> None:
    _set(doc, path, rng.choice(TYPE_POOL))


@_edit
def delete_key(rng: random.Random, doc: Any, path: tuple) -> None:
    _delete(doc, path)


@_edit
def huge_string(rng: random.Random, doc: Any, path: tuple) -> None:
    _set(doc, path, "A" * 2_000_000)


@_edit
def deep_nesting(rng: random.Random, doc: Any, path: tuple) -> None:
    depth = rng.choice([300, 900])
    _set(doc, path, orjson.loads(b"[" * depth + b"]" * depth))


def bad_utf8(rng: random.Random, content: bytes, jsonl: bool) -> bytes:
    at = content.find(b'"', rng.randrange(len(content)))
    at = at if at > 0 else len(content) // 2
    return (
        content[: at + 1] + rng.choice([b"\xff\xfe", b"\xc3", b"\xed\xa0\x80"]) + content[at + 1 :]
    )


def other_encoding(rng: random.Random, content: bytes, jsonl: bool) -> bytes:
    text = content.decode("utf-8")
    return text.encode(rng.choice(["utf-16", "utf-32", "latin-1"]), errors="replace")


def empty_like(rng: random.Random, content: bytes, jsonl: bool) -> bytes:
    return rng.choice(
        [b"", b"   \n", b"null", b"[]", b"{}", b"\n\n", b"[null]", b'""', b"\x00" * 64]
    )


GZIP_SHARE = 0.25
"""Share of cases written gzipped (as NAME.gz); half of those with the compressed stream hit."""


def gzipped(rng: random.Random, data: bytes) -> bytes:
    """`data` gzipped; half the time with bytes of the compressed stream changed (its header
    and trailer kept), so the damage shows only when that block is inflated."""
    packed = bytearray(gzip.compress(data, mtime=0))
    if rng.random() < 0.5 and len(packed) > 24:
        for _ in range(rng.randint(1, 4)):
            packed[rng.randrange(10, len(packed) - 8)] ^= rng.randrange(1, 256)
    return bytes(packed)


MUTATIONS: list[Mutation] = [
    truncate,
    flip_bytes,
    change_type,
    change_type,
    delete_key,
    delete_key,
    huge_string,
    deep_nesting,
    bad_utf8,
    other_encoding,
    empty_like,
]


def _fingerprint(store: Store) -> str:
    rows = store.db.execute("SELECT id, doc FROM trajectories ORDER BY id").fetchall()
    return hashlib.sha256(b"".join(i.encode() + d for i, d in rows)).hexdigest()


def _import_one(store: Store, path: Path) -> tuple[str, str | None]:
    """("valid" | "rejected", error line) of importing one file; raises on a traceback."""
    try:
        report = import_paths(store, [str(path)])
    except UserError as exc:
        return "rejected", str(exc)
    if report.failed:
        return "rejected", report.failed[0].error
    assert report.added + report.duplicates >= 1, path
    return "valid", None


def test_fuzzed_imports_fail_cleanly(shared_data: Path, tmp_path: Path, monkeypatch) -> None:
    rng = random.Random(SEED)
    counts: Counter[str] = Counter()
    problems: list[str] = []
    with Store(tmp_path / "fuzz.db") as store:
        import_paths(store, [str(SAMPLE / "who-and-when/Algorithm-Generated/42.json")])
        for fmt, (name, content) in _seeds(shared_data).items():
            jsonl = name.endswith(".jsonl")
            for case in range(CASES_PER_FORMAT):
                mutation = MUTATIONS[case % len(MUTATIONS)]
                mutated = mutation(rng, content, jsonl)
                folder = tmp_path / f"{fmt}-{case}"
                folder.mkdir()
                path = folder / name
                if rng.random() < GZIP_SHARE:
                    path, mutated = folder / f"{name}.gz", gzipped(rng, mutated)
                path.write_bytes(mutated)
                if rng.random() < 0.25:
                    monkeypatch.setenv(STREAM_THRESHOLD_ENV, "64")
                else:
                    monkeypatch.delenv(STREAM_THRESHOLD_ENV, raising=False)
                before = _fingerprint(store)
                label = f"{fmt} case {case} ({mutation.__name__}, {path.name})"
                try:
                    result, error = _import_one(store, path)
                except Exception as exc:  # a traceback: what this test must never see
                    counts["tracebacks"] += 1
                    problems.append(f"{label}: {type(exc).__name__}: {str(exc)[:300]}")
                    continue
                counts["cases"] += 1
                counts[result] += 1
                if result == "rejected":
                    if _fingerprint(store) != before:
                        counts["store changes"] += 1
                        problems.append(f"{label}: store changed by a rejected file")
                    if "\n" in error or len(error) > MAX_ERROR or not error:
                        problems.append(f"{label}: not one short line: {error[:300]!r}")
        monkeypatch.delenv(STREAM_THRESHOLD_ENV, raising=False)
        counts += _special_files(store, tmp_path)
    print("fuzz counts:", json.dumps(dict(counts)))
    assert problems == [], "\n".join(problems)
    assert counts["tracebacks"] == counts["store changes"] == 0
    assert counts["valid"] > 0 and counts["rejected"] > 0


def _special_files(store: Store, tmp_path: Path) -> Counter[str]:
    """A FIFO and an empty file in a folder: listed, never opened, nothing stored."""
    folder = tmp_path / "special"
    folder.mkdir()
    os.mkfifo(folder / "pipe.json")
    (folder / "empty.json").write_bytes(b"")
    before = _fingerprint(store)
    report = import_paths(store, [str(folder)])
    assert report.special_files == [str(folder / "pipe.json")]
    assert report.not_trajectories == [str(folder / "empty.json")]
    assert _fingerprint(store) == before
    return Counter({"cases": 2, "rejected": 2})


@pytest.mark.parametrize("fmt", ["tau2-bench", "who-and-when"])
def test_one_known_mutation_per_format_is_rejected(
    fmt: str, shared_data: Path, tmp_path: Path
) -> None:
    """Guards the fuzz harness itself: a truncated file is always a rejection."""
    name, content = _seeds(shared_data)[fmt]
    path = tmp_path / name
    path.write_bytes(content[: len(content) // 2])
    with Store(tmp_path / "s.db") as store:
        result, error = _import_one(store, path)
    assert result == "rejected" and "malformed JSON" in error
