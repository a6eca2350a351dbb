"""JSONL export round-trips exactly; Parquet export is readable by pyarrow."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from trajforge.demo import sample_dir
from trajforge.export import export, tables
from trajforge.importers import import_paths
from trajforge.schema import Trajectory
from trajforge.store import Store, TrajectoryFilter
from trajforge.store.lines import document_of_line

SWE_AGENT_DIR = Path(__file__).parent / "data" / "swe-agent"


@pytest.fixture
def sample_store(tmp_path: Path) -> Store:
    with Store(tmp_path / "sample.db") as store:
        report = import_paths(store, [str(sample_dir()), str(SWE_AGENT_DIR)])
        assert report.failed == [] and store.count() == 35
        yield store


def dumps(store: Store) -> list[dict]:
    return sorted((t.model_dump() for t in store.query()), key=lambda d: d["id"])


@pytest.mark.parametrize("name", ["all.jsonl", "all.jsonl.gz"])
def test_jsonl_export_reimports_identically(sample_store: Store, tmp_path: Path, name: str) -> None:
    out = tmp_path / name
    plain = tmp_path / "plain.jsonl"
    assert export("jsonl", sample_store, plain) == 35
    if name.endswith(".gz"):
        out.write_bytes(gzip.compress(plain.read_bytes()))
    else:
        plain.rename(out)
    with Store(tmp_path / "again.db") as again:
        report = import_paths(again, [str(out)])
        assert report.files[0].format == "trajforge" and report.added == 35
        assert dumps(again) == dumps(sample_store)
        assert import_paths(again, [str(out)]).added == 0


@pytest.mark.parametrize("flt", [TrajectoryFilter(), TrajectoryFilter(success=False, limit=9)])
def test_jsonl_export_by_workers_writes_what_this_process_would(
    sample_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flt: TrajectoryFilter
) -> None:
    monkeypatch.setattr(tables, "usable_cores", lambda: 1)
    alone = tmp_path / "alone.jsonl"
    expected = export("jsonl", sample_store, alone, flt)
    monkeypatch.setattr(tables, "usable_cores", lambda: 2)
    monkeypatch.setattr(tables, "JSONL_BATCH_BYTES", 1)  # a run per batch: all but one by workers
    spawned = []
    real_pool = tables.worker_pool
    monkeypatch.setattr(
        tables, "worker_pool", lambda *a, **k: spawned.append(a) or real_pool(*a, **k)
    )
    by_workers = tmp_path / "workers.jsonl"
    assert export("jsonl", sample_store, by_workers, flt) == expected > 1
    assert spawned and by_workers.read_bytes() == alone.read_bytes()


def test_parquet_export_readable(sample_store: Store, tmp_path: Path) -> None:
    out = tmp_path / "all.parquet"
    assert export("parquet", sample_store, out) == 35
    table = pq.read_table(out)
    assert table.num_rows == 35
    rows = {r["id"]: r for r in table.to_pylist()}
    for traj in sample_store.query():
        row = rows[traj.id]
        assert (row["harness"], row["task_id"], row["success"]) == (
            traj.source.harness,
            traj.task.id,
            traj.outcome.success,
        )
        assert row["n_messages"] == len(traj.messages)
        assert row["n_labels"] == len(traj.labels)


def test_parquet_summary_columns_match_the_documents(sample_store: Store, tmp_path: Path) -> None:
    out = tmp_path / "all.parquet"
    export("parquet", sample_store, out)
    for row in pq.read_table(out).to_pylist():
        traj = Trajectory.model_validate_json(row["document"])
        assert traj == sample_store.get(row["id"])
        assert (row["prompt_tokens"], row["completion_tokens"]) == (
            traj.usage.prompt_tokens,
            traj.usage.completion_tokens,
        )
        assert (row["n_faults"], row["parent_id"]) == (len(traj.faults), None)


def test_filtered_exports_hold_the_stored_documents(sample_store: Store, tmp_path: Path) -> None:
    flt = TrajectoryFilter(success=False, environment="tau2-retail")
    out = tmp_path / "failed.jsonl"
    assert export("jsonl", sample_store, out, flt) == sample_store.count(flt) == 2
    lines = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    documents = [orjson.loads(doc) for doc in sample_store.documents(flt)]
    assert [document_of_line(line) for line in lines] == documents
    assert all(isinstance(line["messages"], str) for line in lines)
    small = tmp_path / "failed.parquet"
    assert export("parquet", sample_store, small, flt) == 2
    assert {r.id for r in sample_store.rows(flt)} == set(pq.read_table(small)["id"].to_pylist())
