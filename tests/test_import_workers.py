"""Imports read by worker processes: the same report and the same store as reading every
file in this process, and a clear error when a worker dies."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import trajforge.importers.pipeline as pipeline
from trajforge.errors import UserError
from trajforge.importers import import_paths
from trajforge.importers.trajforge_jsonl import TrajforgeJsonlImporter
from trajforge.jsonfile import WHOLE_FILE, LineRange, line_ranges, lines_before
from trajforge.schema import Message, Task, Trajectory
from trajforge.store import Store


def _mixed_folder(shared_data: Path, folder: Path) -> Path:
    """Real runs of three formats; JSONL exports of some (the same runs again), one of them
    with a bad line late in the file; and a small JSONL file that fails half-way."""
    folder.mkdir()
    shutil.copy(shared_data / "agentrx" / "tau-retail" / "tau_dataset_full.json", folder)
    shutil.copytree(shared_data / "who-and-when" / "Hand-Crafted-sample", folder / "who")
    swe = shared_data / "swe-bench-verified" / "mini-swe-agent_gemini-3-pro"
    for instance in sorted((swe / "trajs").iterdir())[:3]:
        shutil.copytree(instance, folder / "trajs" / instance.name)
    run = Trajectory(task=Task(id="t", environment="e"), messages=[Message(role="user")])
    (folder / "zz-broken.jsonl").write_text(run.model_dump_json() + "\n{not json\n")
    with Store(":memory:") as store:
        import_paths(store, [str(folder / "tau_dataset_full.json")])
        lines = [traj.model_dump_json() for traj in store.query()]
    (folder / "exported.jsonl").write_text("\n".join(lines[:60]) + "\n\n")
    lines[70] = "{not json"
    (folder / "exported-broken.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def _stored(store: Store) -> list[tuple[str, bytes]]:
    return store.db.execute("SELECT id, doc FROM trajectories ORDER BY id").fetchall()


def _indexed(store: Store) -> list[tuple[str, str]]:
    sql = (
        "SELECT t.id, s.body FROM run_search AS s JOIN trajectories AS t ON t.rowid = s.rowid "
        "ORDER BY t.id"
    )
    return store.db.execute(sql).fetchall()


@pytest.mark.parametrize("worker_file_bytes", [pipeline.WORKER_FILE_BYTES, 100_000])
def test_workers_import_what_this_process_would(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, worker_file_bytes: int
) -> None:
    """With a small `WORKER_FILE_BYTES`, the bigger files are read here between the others,
    or, for JSONL, in parts by the workers (a bad line in a late part fails the file)."""
    monkeypatch.setattr(pipeline, "WORKER_FILE_BYTES", worker_file_bytes)
    monkeypatch.setattr(pipeline, "PART_BYTES", 60_000)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # the workers' spool
    folder = _mixed_folder(shared_data, tmp_path / "runs")
    results = {}
    for workers in (0, 2):
        with Store(tmp_path / f"w{workers}.db") as store:
            report = import_paths(store, [str(folder)], workers=workers)
            results[workers] = (report.model_dump(), _stored(store), _indexed(store))
    assert results[2] == results[0]
    assert list((tmp_path / "tmp").iterdir()) == []
    report, stored, _ = results[2]
    failed = {Path(f["path"]).name: f["error"] for f in report["files"] if f["error"]}
    assert sorted(failed) == ["exported-broken.jsonl", "zz-broken.jsonl"]
    assert "[record line 71]" in failed["exported-broken.jsonl"]
    assert len(stored) == 100 + 3 + 3


def test_runs_already_stored_are_counted_as_duplicates(shared_data: Path) -> None:
    source = str(shared_data / "who-and-when" / "Hand-Crafted-sample")
    with Store(":memory:") as store:
        first = import_paths(store, [source], workers=2)
        again = import_paths(store, [source], workers=2)
        assert store.count() == 3
    assert (first.added, first.duplicates, again.added, again.duplicates) == (3, 0, 0, 3)


class _DiesInWorkers(TrajforgeJsonlImporter):
    """Reads trajforge JSONL, except in a worker process, which it kills at once."""

    parent = os.getpid()

    def read(self, path: Path) -> Iterator[Trajectory]:
        if os.getpid() != self.parent:
            os._exit(3)
        return super().read(path)


def test_a_dead_worker_stops_the_import_with_what_to_do(shared_data: Path, tmp_path: Path) -> None:
    who = sorted((shared_data / "who-and-when" / "Hand-Crafted-sample").iterdir())
    folder = tmp_path / "runs"
    folder.mkdir()
    with Store(tmp_path / "source.db") as source:
        import_paths(source, [str(p) for p in who])
        for n, traj in enumerate(source.query()):
            (folder / f"{n}.jsonl").write_text(traj.model_dump_json() + "\n")
    jobs = [(path, _DiesInWorkers()) for path in sorted(folder.iterdir())]
    with Store(tmp_path / "s.db") as store:
        with pytest.raises(UserError, match=r"worker process reading .*0\.jsonl died"):
            pipeline.import_jobs(store, jobs, pipeline.ImportReport(), workers=1)
        assert store.count() == 0
        report = pipeline.import_jobs(store, jobs, pipeline.ImportReport(), workers=0)
        assert (report.added, store.count()) == (3, 3)


def test_a_temporary_folder_that_cannot_be_used_stops_the_import_with_what_to_do(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    source = shared_data / "who-and-when" / "Hand-Crafted-sample"
    with Store(tmp_path / "s.db") as store:
        with pytest.raises(UserError, match=r"workers' results.*set TMPDIR.*--workers 0"):
            import_paths(store, [str(source)], workers=1)
        assert store.count() == 0
        assert import_paths(store, [str(source)], workers=0).added == 3


def test_workers_start_only_where_they_can_share_the_reading(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pipeline, "usable_cores", lambda: 8)
    big, small = pipeline.WORKER_FILE_BYTES + 1, pipeline.PARALLEL_MIN_BYTES // 4
    assert pipeline.default_readers([big]) == pipeline.MAX_READERS  # read in parts
    assert pipeline.default_readers([small] * 8) == pipeline.MAX_READERS
    assert pipeline.default_readers([pipeline.PARALLEL_MIN_BYTES]) == 0  # one file, read whole
    assert pipeline.default_readers([small, small]) == 0  # too little to read
    monkeypatch.setattr(pipeline, "usable_cores", lambda: 1)
    assert pipeline.default_readers([big, big]) == 0


def test_each_file_read_is_forgotten_by_the_page_cache_once_read(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read here, a file's pages are dropped once its runs are stored; read by a worker, once
    its part is read (`_read_piece`, called here)."""
    forgotten: list[tuple[str, LineRange]] = []
    monkeypatch.setattr(
        pipeline, "forget_cached", lambda p, r=WHOLE_FILE: forgotten.append((Path(p).name, r))
    )
    source = shared_data / "who-and-when" / "Hand-Crafted-sample"
    with Store(":memory:") as store:
        import_paths(store, [str(source)], workers=0)
    assert sorted(forgotten) == sorted((p.name, WHOLE_FILE) for p in source.iterdir())
    forgotten.clear()
    path = tmp_path / "runs.jsonl"
    run = Trajectory(task=Task(id="t", environment="e"), messages=[Message(role="user")])
    path.write_text(run.model_dump_json() + "\n")
    part = LineRange(0, None, 1)
    encoded = pipeline._read_piece(path, TrajforgeJsonlImporter(), part, pipeline.SourceOverrides())
    assert len(encoded) == 1 and forgotten == [("runs.jsonl", part)]


def _part_failures(path: Path) -> list[tuple[LineRange, str]]:
    """The parts of a JSONL file that fail when a worker reads them, and why."""
    importer, overrides = TrajforgeJsonlImporter(), pipeline.SourceOverrides()
    read = [
        (part, pipeline._read_piece(path, importer, part, overrides))
        for part in line_ranges(path, 1000)
    ]
    return [(part, result) for part, result in read if isinstance(result, str)]


def test_a_part_that_fails_names_its_line_counted_from_the_start_of_the_file(
    tmp_path: Path,
) -> None:
    """Parts past the first are cut without counting lines; one that fails counts them."""
    run = Trajectory(task=Task(id="t", environment="e"), messages=[Message(role="user")])
    lines = [run.model_dump_json()] * 50
    path = tmp_path / "runs.jsonl"
    lines[39] = "{not json"
    path.write_text("\n".join(lines) + "\n")
    ((part, message),) = _part_failures(path)
    assert part.first_line is None and "[record line 40]: malformed JSON" in message
    lines[39] = run.model_copy(update={"messages": []}).model_dump_json()
    path.write_text("\n".join(lines) + "\n")
    ((part, message),) = _part_failures(path)
    first = lines_before(path, part.start) + 1
    assert first > 1 and f"[record from line {first}, run {40 - first}]: the run has no" in message
