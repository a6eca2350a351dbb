"""Parquet shards written by `export --shard-rows` and read back with DuckDB give the answers
the SQLite store gives: `ls` rows, `stats`, every filter and full-text searches, on real runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.errors import UserError
from trajforge.export import export
from trajforge.importers import import_paths
from trajforge.store import Store, TrajectoryFilter
from trajforge.store.parquet import ParquetRuns
from trajforge.store.search_query import parse_search
from trajforge.store.stats import compute_stats

pytest.importorskip("duckdb")

REPO = Path(__file__).resolve().parents[1]
SHARD_ROWS = 37
SEARCHES = [
    "reservation",
    '"cancel reservation"',
    "cancel*",
    "refund OR exchange",
    "flight NOT cancel",
    "baggage AND (refund OR exchange)",
    "cancel flight NOT refund",
    "reservation+id",
    '"#W2378156"',
    "error_message",
    "Basic_Economy",
    "zodiac",
    "ZODIAC",
    '"user id"*',
]
FILTERS = [
    TrajectoryFilter(),
    TrajectoryFilter(environment="tau-airline"),
    TrajectoryFilter(success=False, environment="tau-retail"),
    TrajectoryFilter(success=True),
    TrajectoryFilter(harness="tau2-bench"),
    TrajectoryFilter(model="GPT"),
    TrajectoryFilter(model_error=False, run="toolorchestra"),
    TrajectoryFilter(forks=False, limit=20),
    TrajectoryFilter(text="reservation", success=False, limit=7),
    TrajectoryFilter(limit=SHARD_ROWS),  # a limit that ends with a shard
    TrajectoryFilter(limit=SHARD_ROWS + 1),  # ... one past it
    TrajectoryFilter(environment="tau-retail", limit=3 * SHARD_ROWS),  # across shards
]


@pytest.fixture(scope="module")
def stores(shared_data: Path, tmp_path_factory: pytest.TempPathFactory):
    """The tau-bench and tau2-bench runs in a store, and its Parquet shards."""
    folder = tmp_path_factory.mktemp("shards")
    with Store(folder / "runs.db") as store:
        folders = [str(shared_data / "tau-bench"), str(shared_data / "tau2-bench")]
        report = import_paths(store, folders)
        assert report.failed == [] and store.count() > 300
        shards = folder / "shards"
        assert export("parquet", store, shards, shard_rows=SHARD_ROWS) == store.count()
        with ParquetRuns(shards) as parquet:
            yield store, parquet, shards


def test_shards_hold_every_run_once_in_store_order(stores) -> None:
    store, _, shards = stores
    files = sorted(shards.glob("part-*.parquet"))
    sizes = [pq.read_metadata(f).num_rows for f in files]
    assert len(files) == -(-store.count() // SHARD_ROWS) and max(sizes) == SHARD_ROWS
    ids = [i for f in files for i in pq.read_table(f, columns=["id"]).column("id").to_pylist()]
    assert ids == [row.id for row in store.rows()]


@pytest.mark.parametrize("flt", FILTERS, ids=lambda f: repr(f.model_dump(exclude_defaults=True)))
def test_rows_and_stats_equal_the_store(stores, flt: TrajectoryFilter) -> None:
    store, parquet, _ = stores
    assert list(parquet.iter_rows(flt)) == store.rows(flt)
    assert compute_stats(parquet, flt) == compute_stats(store, flt)


@pytest.mark.parametrize("q", SEARCHES)
def test_search_finds_the_runs_the_full_text_index_finds(stores, q: str) -> None:
    store, parquet, _ = stores
    flt = TrajectoryFilter(text=q)
    expected = store.rows(flt)
    assert [r.id for r in parquet.iter_rows(flt)] == [r.id for r in expected]


def test_the_searches_are_not_trivial(stores) -> None:
    store, _, _ = stores
    counts = [store.count(TrajectoryFilter(text=q)) for q in SEARCHES]
    assert sum(0 < n < store.count() for n in counts) >= 10, counts


REFUSED = ['"open', "a AND", "NOT x", "foo-bar", "(a OR b", "*", "a (b)", "(a) b", "a.b", "()"]


@pytest.mark.parametrize("q", REFUSED)
def test_queries_the_store_refuses_are_refused(stores, q: str) -> None:
    store, parquet, _ = stores
    with pytest.raises(UserError, match="is not valid"):
        store.rows(TrajectoryFilter(text=q))
    with pytest.raises(UserError, match="is not valid"):
        parse_search(q)
    with pytest.raises(UserError, match="is not valid"):
        list(parquet.iter_rows(TrajectoryFilter(text=q)))


def test_export_again_replaces_the_shards_and_keeps_other_folders(stores, tmp_path: Path) -> None:
    store, _, _ = stores
    out = tmp_path / "shards"
    export("parquet", store, out, shard_rows=100)
    export("parquet", store, out, TrajectoryFilter(environment="tau-airline"), shard_rows=100)
    with ParquetRuns(out) as again:
        assert list(again.iter_rows()) == store.rows(TrajectoryFilter(environment="tau-airline"))
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match="holds other files"):
        export("parquet", store, other, shard_rows=100)
    assert [p.name for p in other.iterdir()] == ["keep.txt"]
    with pytest.raises(UserError, match="no Parquet shards"):
        ParquetRuns(other)


def _cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "trajforge", *args],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_cli_ls_and_stats_read_the_shards(stores, tmp_path: Path) -> None:
    store, _, _ = stores
    shards = tmp_path / "cli-shards"
    _cli("export", "--db", str(store.path), "--shard-rows", "50", "-o", str(shards))
    assert len(list(shards.glob("part-*.parquet"))) == -(-store.count() // 50)
    for args in (["ls", "--json", "--env", "tau-airline", "--outcome", "failure"],
                 ["ls", "--json", "--search", '"cancel reservation"'],
                 ["stats", "--json"]):  # fmt: skip
        from_store = json.loads(_cli(*args, "--db", str(store.path)))
        assert json.loads(_cli(*args, "--parquet", str(shards))) == from_store
        assert from_store


def test_ls_refuses_both_db_and_parquet_but_not_a_db_from_the_environment(
    stores, tmp_path: Path
) -> None:
    store, _, _ = stores
    shards = tmp_path / "both-shards"
    export("parquet", store, shards, shard_rows=100)
    both = ["ls", "--json", "--db", str(store.path), "--parquet", str(shards)]
    done = CliRunner().invoke(app, both)
    assert done.exit_code == 1 and "give --db or --parquet, not both" in done.output
    listed = CliRunner().invoke(
        app, ["ls", "--json", "--parquet", str(shards)], env={"TRAJFORGE_DB": str(store.path)}
    )
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout)  # the shards' runs


def test_a_failed_export_leaves_the_old_shards(stores, tmp_path: Path, monkeypatch) -> None:
    store, _, _ = stores
    out = tmp_path / "kept"
    export("parquet", store, out, shard_rows=100)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def broken(*args, **kwargs):
        yield from Store.column_batches(store, *args, **kwargs, max_rows=50)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store, "column_batches", broken)
    with pytest.raises(UserError, match="cannot write"):
        export("parquet", store, out, shard_rows=10)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["kept"]
