"""Store files: creation survives kills and races; odd --db paths give one error line."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from trajforge.demo import sample_dir
from trajforge.errors import UserError
from trajforge.schema import Task, Trajectory
from trajforge.store import Store
from trajforge.store.migrations import MIGRATIONS

RUN = sample_dir() / "who-and-when" / "Algorithm-Generated" / "14.json"

# Opens a store whose migrations each take a little while, so a kill lands inside them.
SLOW_CREATE = """
import sys, time
from trajforge.store import migrations
def slow(migration):
    def run(db):
        migration(db)
        time.sleep(0.02)
    return run
migrations.MIGRATIONS[:] = [slow(m) for m in migrations.MIGRATIONS]
from trajforge.demo import sample_dir
from trajforge.store import Store
print("go", flush=True)
Store(sys.argv[1]).close()
"""


def python(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def assert_usable(path: Path) -> None:
    with Store(path) as store:
        assert store.count() == 0
        (version,) = store.db.execute("PRAGMA user_version").fetchone()
        assert version == len(MIGRATIONS)


def test_killed_while_creating_leaves_a_usable_store(tmp_path: Path) -> None:
    rng = random.Random(12)
    for attempt in range(12):
        path = tmp_path / f"k{attempt}.db"
        child = python("-c", SLOW_CREATE, str(path))
        assert child.stdout is not None and child.stdout.readline() == "go\n"
        time.sleep(rng.uniform(0, 0.08))
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)
        assert_usable(path)


def test_concurrent_first_use_creates_the_schema_once(tmp_path: Path) -> None:
    for attempt in range(3):
        path = tmp_path / f"r{attempt}.db"
        children = [python("-c", SLOW_CREATE, str(path)) for _ in range(4)]
        for child in children:
            _, err = child.communicate(timeout=60)
            assert child.returncode == 0, err
        assert_usable(path)


# Each round: PROCESSES processes wait at a barrier, then all open the same new store and
# import into it (one empties the journal for its bulk import while the others create the
# schema: the case where SQLite answered "database is locked" at once).
CONCURRENT_IMPORTS = """
import multiprocessing as mp, sys
from pathlib import Path
from trajforge.importers import import_paths
from trajforge.store import Store

def work(args):
    path, barrier = args
    barrier.wait()
    try:
        with Store(path) as store:
            import_paths(store, [sys.argv[2]])
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""

if __name__ == "__main__":
    rounds, processes = int(sys.argv[3]), int(sys.argv[4])
    ctx = mp.get_context("fork")
    barrier = ctx.Manager().Barrier(processes)
    with ctx.Pool(processes) as pool:
        for n in range(rounds):
            path = str(Path(sys.argv[1]) / f"s{n}.db")
            for error in pool.map(work, [(path, barrier)] * processes, chunksize=1):
                if error:
                    print(error)
"""


def test_concurrent_first_imports_into_a_new_store_all_succeed(tmp_path: Path) -> None:
    """40 rounds of 3 processes creating and filling one new store at once (before: about
    one process in 30 failed with "database is locked")."""
    child = python("-c", CONCURRENT_IMPORTS, str(tmp_path), str(RUN), "40", "3")
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err
    assert out == "", out
    for path in tmp_path.glob("s*.db"):
        with Store(path) as store:
            assert store.count() == 1


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trajforge", *args], capture_output=True, text=True, timeout=60
    )


def one_error_line(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    for word in words:
        assert word in result.stderr


def make_store(path: Path) -> bytes:
    Store(path).close()
    return path.read_bytes()


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("text.db", b"just some notes\n", ["not a trajforge store"]),
        ("runs.json", b'{"history": []}', ["not a trajforge store"]),
        ("truncated.db", None, ["truncated"]),
        ("other.db", "other", ["not a trajforge store"]),
    ],
)
def test_db_that_is_not_a_store(
    tmp_path: Path, name: str, content: bytes | str | None, words: list[str]
) -> None:
    path = tmp_path / name
    if content is None:
        full = make_store(tmp_path / "full.db")
        path.write_bytes(full[: len(full) // 2])
    elif content == "other":
        with sqlite3.connect(path) as other:
            other.execute("CREATE TABLE notes (x)")
        other.close()
    else:
        path.write_bytes(content)
    before = path.read_bytes()
    for command in (["ls"], ["stats"], ["import", str(RUN)]):
        one_error_line(cli(*command, "--db", str(path)), str(path), *words)
    assert path.read_bytes() == before


def test_db_directory_empty_and_special(tmp_path: Path) -> None:
    one_error_line(cli("ls", "--db", str(tmp_path)), "is a folder")
    one_error_line(cli("ls", "--db", ""), "store path is empty")
    one_error_line(cli("stats", "--db", "/dev/null"), "not a regular file")
    one_error_line(cli("import", str(RUN), "--db", str(tmp_path / "no" / "a.db")), "does not exist")


@pytest.mark.skipif(os.geteuid() != 0, reason="read-only files are writable by root only")
def test_db_read_only_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "ro.db"
    make_store(path)
    path.chmod(0o444)
    os.chmod(tmp_path, 0o555)
    try:
        result = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
             "-m", "trajforge", "import", str(RUN), "--db", str(path)],
            capture_output=True, text=True, timeout=60, env=os.environ | {"HOME": "/tmp"},
        )  # fmt: skip
    finally:
        os.chmod(tmp_path, 0o755)
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr


def _contents(store: Store) -> list[tuple]:
    return store.db.execute("SELECT id, doc FROM trajectories ORDER BY id").fetchall()


@pytest.mark.parametrize("first_use", [True, False])
def test_a_full_disk_during_an_import_names_it_and_keeps_the_store(
    tmp_path: Path, first_use: bool
) -> None:
    """SQLite's page limit stands in for a full disk: the import stops with an error that
    says the disk is full (not "cannot rollback"), and the store is as it was."""
    from trajforge.importers import import_paths
    from trajforge.store import StoreFull

    big = sample_dir() / "tau-bench" / "historical_trajectories" / "gpt-4o-airline.json"
    with Store(tmp_path / "s.db") as store:
        if not first_use:
            import_paths(store, [str(RUN)])
        before = _contents(store)
        (pages,) = store.db.execute("PRAGMA page_count").fetchone()
        store.db.execute(f"PRAGMA max_page_count = {pages + 20}")
        with pytest.raises(StoreFull) as caught:
            import_paths(store, [str(big)], workers=0)
        message = str(caught.value)
        assert "disk is full" in message and "SQLITE_FULL" in message
        assert str(tmp_path / "s.db") in message and "rollback" not in message
        assert _contents(store) == before
        assert store.db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        store.db.execute("PRAGMA max_page_count = 1073741823")
        assert import_paths(store, [str(big)]).added > 0  # usable once there is room


def test_opening_while_another_connection_checkpoints_is_not_a_truncated_file(
    tmp_path: Path,
) -> None:
    """A checkpoint writes the header's new page count before the pages past the old end:
    a store opened meanwhile is growing, not truncated."""
    path = tmp_path / "busy.db"
    writer = Store(path)
    writer.db.execute("PRAGMA wal_autocheckpoint=1")  # every commit copies the log back
    runs = [Trajectory(task=Task(id=f"t{i}"), messages=[]) for i in range(8)]
    stop, errors = threading.Event(), []

    def write() -> None:
        count = 0
        while not stop.is_set():
            run = runs[count % 8].model_copy(
                update={"id": f"r{count}", "metadata": {"pad": "x" * 20_000}}
            )
            with writer.transaction():
                writer.add(run)
            count += 1

    thread = threading.Thread(target=write)
    thread.start()
    try:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline and not errors:
            try:
                Store(path).close()
            except UserError as exc:
                errors.append(str(exc))
    finally:
        stop.set()
        thread.join()
        writer.close()
    assert errors == []


SWITCH_TO_DELETE = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA busy_timeout=0")
try:
    print(db.execute("PRAGMA journal_mode=delete").fetchone()[0])
except sqlite3.OperationalError as exc:
    print("refused:", exc)
"""


def test_a_second_store_on_an_open_file_keeps_the_first_ones_locks(tmp_path: Path) -> None:
    """Reading the file with a handle of our own would drop this process's SQLite locks on
    it when closed: another process could then take the file over from the open store."""
    path = tmp_path / "held.db"
    first = Store(path)
    first.count()
    second = Store(path)
    try:
        switched = subprocess.run(
            [sys.executable, "-c", SWITCH_TO_DELETE, str(path)],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout.strip()  # fmt: skip
        assert first.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert switched != "delete"  # the open store's lock refused the other process
    finally:
        second.close()
        first.close()
