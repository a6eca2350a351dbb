"""Malformed input names the file, the record and the problem; unknown formats list formats."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from test_import_formats import MINI, SWE_AGENT, TAU2, TAU_AIRLINE, WHO
from trajforge.errors import InputError, UnknownFormatError
from trajforge.importers import import_paths
from trajforge.importers.base import STREAM_THRESHOLD_ENV
from trajforge.importers.registry import DETECTION_ORDER, importer, require_format
from trajforge.store import Store


def read(fmt: str, path: Path) -> list:
    return list(importer(fmt).read(path))


def truncated(path: Path, tmp_path: Path) -> Path:
    data = path.read_bytes()
    out = tmp_path / path.name
    out.write_bytes(data[: len(data) * 2 // 3])
    return out


@pytest.mark.parametrize(
    ("fmt", "path"),
    [
        ("tau-bench", TAU_AIRLINE),
        ("tau2-bench", TAU2),
        ("who-and-when", WHO),
        ("mini-swe-agent", MINI),
        ("swe-agent", SWE_AGENT),
    ],
)
def test_truncated_json_names_the_file(fmt: str, path: Path, tmp_path: Path) -> None:
    bad = truncated(path, tmp_path)
    with pytest.raises(InputError) as caught:
        read(fmt, bad)
    assert str(bad) in str(caught.value) and "malformed JSON" in str(caught.value)


def test_truncated_stream_names_the_record(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(STREAM_THRESHOLD_ENV, "1000")
    bad = truncated(TAU_AIRLINE, tmp_path)
    with pytest.raises(InputError, match=r"\[record \d+\]: malformed JSON"):
        read("tau-bench", bad)


def test_truncated_gzip_is_an_input_error(tmp_path: Path) -> None:
    data = gzip.compress(WHO.read_bytes())
    bad = tmp_path / "14.json.gz"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"14\.json\.gz"):
        read("who-and-when", bad)


def write_json(tmp_path: Path, name: str, value: object) -> Path:
    path = tmp_path / name
    path.write_bytes(orjson.dumps(value))
    return path


def test_who_and_when_step_outside_history(tmp_path: Path) -> None:
    record = orjson.loads(WHO.read_bytes()) | {"mistake_step": "99"}
    bad = write_json(tmp_path, "w.json", record)
    with pytest.raises(InputError) as caught:
        read("who-and-when", bad)
    assert str(caught.value) == (
        f"{bad} [record $]: mistake_step: 99 is outside history (0..{len(record['history']) - 1})"
    )


def test_tau_bench_bad_message_names_run_and_message(tmp_path: Path) -> None:
    runs = orjson.loads(TAU_AIRLINE.read_bytes())
    runs[2]["traj"][3]["role"] = "robot"
    bad = write_json(tmp_path, "gpt-4o-airline.json", runs)
    with pytest.raises(InputError, match=r"\[record 2\]: traj\[3\]: role must be one of"):
        read("tau-bench", bad)


def test_tau2_unknown_task_names_the_simulation(tmp_path: Path) -> None:
    data = orjson.loads(TAU2.read_bytes())
    data["simulations"][1]["task_id"] = "no-such-task"
    bad = write_json(tmp_path, TAU2.name, data)
    with pytest.raises(InputError, match=r"\[record simulations\[1\]\]: task_id 'no-such-task'"):
        read("tau2-bench", bad)


def test_trajforge_jsonl_invalid_field_names_the_line(tmp_path: Path) -> None:
    good = read("tau-bench", TAU_AIRLINE)[0].model_dump(mode="json")
    bad_doc = good | {"outcome": {"success": "maybe"}}
    bad = tmp_path / "export.jsonl"
    bad.write_bytes(orjson.dumps(good) + b"\n" + orjson.dumps(bad_doc) + b"\n")
    with pytest.raises(InputError, match=r"\[record line 2\]: outcome.success"):
        read("trajforge", bad)


def test_unknown_format_lists_known_formats(tmp_path: Path) -> None:
    odd = write_json(tmp_path, "odd.json", {"hello": "world"})
    with pytest.raises(UnknownFormatError) as caught:
        require_format(odd)
    message = str(caught.value)
    assert str(odd) in message and "\n" not in message
    assert all(name in message for name in DETECTION_ORDER)


def test_failed_file_leaves_store_unchanged(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(STREAM_THRESHOLD_ENV, "1000")  # the first runs parse before the error
    bad = truncated(TAU_AIRLINE, tmp_path)
    with Store(tmp_path / "s.db") as store:
        import_paths(store, [str(WHO)])
        report = import_paths(store, [str(bad)])
        assert report.added == 0 and len(report.failed) == 1
        assert store.count() == 1


def test_wrong_field_type_names_the_message_field(tmp_path: Path) -> None:
    runs = orjson.loads(TAU_AIRLINE.read_bytes())
    runs[1]["traj"][2]["content"] = 123
    bad = write_json(tmp_path, "gpt-4o-airline.json", runs)
    with pytest.raises(InputError) as caught:
        read("tau-bench", bad)
    message = str(caught.value)
    assert message.startswith(f"{bad} [record 1]: messages.2.content") and "\n" not in message


def test_who_and_when_truth_written_as_a_string(tmp_path: Path) -> None:
    record = orjson.loads(WHO.read_bytes())
    path = write_json(tmp_path, "w.json", record | {"is_correct": "false"})
    (traj,) = read("who-and-when", path)
    assert traj.outcome.success is False and traj.outcome.reward == 0.0
    bad = write_json(tmp_path, "b.json", record | {"is_correct": "x" * 10_000})
    with pytest.raises(InputError) as caught:
        read("who-and-when", bad)
    assert "is_correct: expected true or false" in str(caught.value)
    assert len(str(caught.value)) < 300


def test_keys_after_a_long_first_value_are_still_detected(tmp_path: Path) -> None:
    """Detection must not depend on where the telling keys sit in the file."""
    record = orjson.loads(WHO.read_bytes())
    record["history"][0]["content"] = "long question " * 20_000
    ordered = {"history": record.pop("history")} | record
    folder = tmp_path / "runs"
    folder.mkdir()
    path = write_json(folder, "long.json", ordered)
    assert require_format(path).name == "who-and-when"
    with Store(tmp_path / "s.db") as store:
        report = import_paths(store, [str(folder)])
    assert report.added == 1 and report.not_trajectories == []


def corrupt_gzip(source: Path, out: Path, at: float) -> Path:
    """`source` gzipped, with bytes flipped at fraction `at` of the compressed stream (the
    header and trailer stay valid, so the damage shows only when that block decompresses)."""
    data = bytearray(gzip.compress(source.read_bytes()))
    middle = 10 + int((len(data) - 18) * at)
    for i in range(middle, middle + 16):
        data[i] ^= 0x5A
    out.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize(
    ("source", "at", "stream"),
    [
        (WHO, 0.1, False),  # in the head that detection reads
        (TAU_AIRLINE, 0.8, False),  # past the head: while the whole file is parsed
        (TAU_AIRLINE, 0.8, True),  # while the array is streamed
        (TAU_AIRLINE, 0.1, True),
    ],
)
def test_corrupt_gzip_stream_is_one_error_naming_the_file(
    source: Path, at: float, stream: bool, tmp_path: Path
) -> None:
    bad = corrupt_gzip(source, tmp_path / f"{source.name}.gz", at)
    env = {**os.environ, STREAM_THRESHOLD_ENV: "1000" if stream else str(10**12)}
    result = subprocess.run(
        [sys.executable, "-m", "trajforge", "import", str(bad), "--db", str(tmp_path / "s.db")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert str(bad) in lines[0]
    # zlib's error, or the JSON parser's when the damaged block still inflates to garbage
    assert "cannot read file" in lines[0] or "malformed JSON" in lines[0]
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("empty.traj", {"history": [], "mistake_step": "x"}),  # swe-agent, by its name
        ("tau.json", [{"task_id": 1, "traj": [], "reward": 0.0, "info": {}}]),
        ("chat.jsonl", [{"messages": []}]),
    ],
)
def test_a_run_with_no_messages_is_not_imported(name: str, content: object, tmp_path: Path) -> None:
    """Whatever the format, a run without a single message is an error naming the file and
    the run, and the store stays empty (Who&When already refuses an empty `history`: its
    `mistake_step` cannot point into it)."""
    path = tmp_path / name
    if name.endswith(".jsonl"):
        path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in content))  # type: ignore[attr-defined]
    else:
        path.write_bytes(orjson.dumps(content))
    with Store(tmp_path / "s.db") as store:
        report = import_paths(store, [str(path)])
        assert store.count() == 0
    assert [f.error for f in report.files if f.error], report
    error = report.files[0].error or ""
    assert str(path) in error and "the run has no messages" in error


@pytest.mark.parametrize(
    ("name", "compress", "words"),
    [
        ("14.json.bz2", "bz2", "compressed with bzip2; decompress it first"),
        ("14.json.xz", "lzma", "compressed with xz; decompress it first"),
        ("14.json", "gzip", "compressed with gzip; name it 14.json.gz"),
    ],
)
def test_a_file_compressed_otherwise_than_gz_names_the_fix(
    name: str, compress: str, words: str, tmp_path: Path
) -> None:
    """Only gzip named .gz is decompressed: other compressed files say how to read them."""
    import importlib

    module = importlib.import_module(compress)
    path = tmp_path / name
    path.write_bytes(module.compress(WHO.read_bytes()))
    with Store(tmp_path / "s.db") as store, pytest.raises(UnknownFormatError) as caught:
        import_paths(store, [str(path)])
    assert str(path) in str(caught.value) and words in str(caught.value)
