"""Importing files and folders into a store: each file all or nothing, committed in groups."""

from __future__ import annotations

import getpass
import glob
import os
import shlex
import stat
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, Field
from pydantic_core import PydanticSerializationError

from trajforge.errors import InputError, UserError
from trajforge.importers.base import (
    WHOLE_FILE,
    Importer,
    LineRange,
    ReadsLineRanges,
    data_size,
)
from trajforge.importers.registry import detect_format, require_format
from trajforge.jsonfile import forget_cached, line_ranges, lines_before
from trajforge.processes import (
    Spool,
    SpoolError,
    ignore_interrupts,
    spool,
    usable_cores,
    worker_pool,
)
from trajforge.progress import ProgressLines
from trajforge.schema import IMPORT_WARNINGS, Trajectory
from trajforge.store import EncodedTrajectory, Store, StoreFull, encode
from trajforge.store.metadata import Actor, Filled, MetadataUpdate, fill_unknown


class FileResult(BaseModel):
    """What happened to one file."""

    path: str = Field(description="The file, as given or found.")
    format: str | None = Field(default=None, description="Format it was read as.")
    added: int = Field(default=0, description="Trajectories added to the store.")
    duplicates: int = Field(default=0, description="Trajectories already in the store.")
    filled: int = Field(
        default=0,
        description="Runs already stored without a model / run name that got `--model` / "
        "`--run` (logged in the store).",
    )
    kept: list[str] = Field(
        default_factory=list,
        description="Runs already stored with another model / run name, which they keep.",
    )
    filled_fields: list[str] = Field(
        default_factory=list, description="Which of model / run were filled in."
    )
    kept_fields: list[str] = Field(
        default_factory=list, description="Which of model / run those runs kept."
    )
    error: str | None = Field(default=None, description="Why the file failed (nothing added).")
    warnings: list[str] = Field(
        default_factory=list,
        description="What the importer could not read (the runs were added without it).",
    )


class SourceOverrides(BaseModel):
    """Source fields to set on every imported trajectory (for files that do not name them)."""

    model: str | None = Field(default=None, description="Model that drove the agent.")
    run: str | None = Field(default=None, description="Run or experiment name.")

    def flags(self, only: Iterable[str] | None = None) -> str:
        """The overrides as command-line flags (`--model gpt-4o --run agentrx`)."""
        given = self.model_dump(exclude_none=True)
        wanted = set(given if only is None else only)
        return " ".join(shlex.join([f"--{k}", str(v)]) for k, v in given.items() if k in wanted)

    def command(self) -> str:
        """How the import is named in the store's metadata log."""
        return f"trajforge import {self.flags()}"

    def apply(self, trajs: Iterable[Trajectory]) -> Iterator[Trajectory]:
        """The trajectories with the overrides set.

        The id is the content id of the run as the file gave it, taken before the overrides
        are set: importing the same file again, with or without `--model`/`--run`, finds the
        run already stored instead of adding a copy that differs only in those labels.
        """
        changes = self.model_dump(exclude_none=True)
        for traj in trajs:
            if changes:
                traj.with_id()
                traj.source = traj.source.model_copy(update=changes)
            yield traj


class ImportReport(BaseModel):
    """Summary of an import."""

    files: list[FileResult] = Field(default_factory=list)
    not_trajectories: list[str] = Field(default_factory=list, description="Skipped files.")
    special_files: list[str] = Field(
        default_factory=list,
        description="Skipped FIFOs, devices and sockets found in folders (never opened).",
    )
    sidecars: list[str] = Field(default_factory=list, description="Consumed companion files.")

    @property
    def added(self) -> int:
        return sum(f.added for f in self.files)

    @property
    def duplicates(self) -> int:
        return sum(f.duplicates for f in self.files)

    @property
    def filled(self) -> int:
        return sum(f.filled for f in self.files)

    @property
    def kept(self) -> list[str]:
        return [run for f in self.files for run in f.kept]

    @property
    def kept_fields(self) -> list[str]:
        return sorted({field for f in self.files for field in f.kept_fields})

    @property
    def filled_fields(self) -> list[str]:
        return sorted({field for f in self.files for field in f.filled_fields})

    @property
    def failed(self) -> list[FileResult]:
        return [f for f in self.files if f.error]


def expand(paths: Iterable[str]) -> tuple[list[Path], list[Path]]:
    """(explicit files, files found in folders) for paths, folders and globs."""
    explicit: list[Path] = []
    in_folders: list[Path] = []
    for raw in paths:
        matches = sorted(glob.glob(raw, recursive=True)) if glob.has_magic(raw) else [raw]
        if not matches:
            raise UserError(f"no file matches '{raw}'")
        for match in map(Path, matches):
            kind = file_kind(match)
            if kind == "folder":
                in_folders.extend(files_under(match))
            elif kind == "file":
                explicit.append(match)
            elif kind == "missing":
                raise UserError(f"no such file or folder: {match}")
            else:
                raise UserError(f"{match}: is a {kind}, not a file of runs")
    return explicit, in_folders


def file_kind(path: Path) -> str:
    """ "file", "folder", "missing", or what else `path` is (a FIFO, a device...).

    Decided from `stat` alone: a FIFO or a device is never opened (reading a FIFO with no
    writer would wait for ever). An unreadable path is a `UserError`.
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "special file"


def files_under(folder: Path) -> list[Path]:
    """The files below `folder`, folder by folder in name order (hidden ones included)."""
    found: list[Path] = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        found.extend(Path(root, name) for name in sorted(files))
    return found


def plan(
    paths: Iterable[str], fmt: str | None = None, progress: ProgressLines | None = None
) -> tuple[list[tuple[Path, Importer]], ImportReport]:
    """Decide the importer of each file; returns ([(path, importer)], report-so-far).

    Explicit files must be recognized (else a UserError); unrecognized files found in folders
    are listed as not trajectories, unreadable ones as failed. Sidecars claimed by a
    recognized file are consumed. `progress` counts the files as their formats are decided
    (about 0.2 ms a file on the shared data).
    """
    explicit, in_folders = expand(paths)
    report = ImportReport()
    counted: Callable[[list[Path]], Iterator[Path]] = iter
    if progress is not None:
        progress.total, counted = len(explicit) + len(in_folders), progress.each
    jobs = [(p, require_format(p, fmt)) for p in counted(explicit)]
    candidates = []
    for path in counted(in_folders):
        try:
            if file_kind(path) not in ("file", "missing"):
                report.special_files.append(str(path))
                continue
            candidates.append((path, _detect(path, fmt)))
        except UserError as exc:
            report.files.append(FileResult(path=str(path), error=str(exc)))
    jobs.extend((p, imp) for p, imp in candidates if imp is not None)
    claimed = _claimed(jobs)
    for path, imp in candidates:
        if imp is None:
            claimed_here = os.path.abspath(path) in claimed
            (report.sidecars if claimed_here else report.not_trajectories).append(str(path))
    report.sidecars.extend(str(p) for p, _ in jobs if os.path.abspath(p) in claimed)
    return [(p, imp) for p, imp in jobs if os.path.abspath(p) not in claimed], report


def _claimed(jobs: list[tuple[Path, Importer]]) -> set[str]:
    """The companion files the jobs' importers read with their runs: an ATIF continuation
    is itself a trajectory file, but imported as part of the run it continues."""
    claimed: set[str] = set()
    for path, imp in jobs:
        own = os.path.abspath(path)
        claimed.update(a for a in map(os.path.abspath, imp.sidecars(path)) if a != own)
    return claimed


def import_paths(
    store: Store,
    paths: Iterable[str],
    fmt: str | None = None,
    on_file: Callable[[FileResult], None] | None = None,
    overrides: SourceOverrides | None = None,
    workers: int | None = None,
) -> ImportReport:
    """Import files, folders and globs; each file commits alone or not at all (`workers`:
    see `import_jobs`)."""
    jobs, report = plan(paths, fmt)
    return import_jobs(store, jobs, report, on_file, overrides, workers)


COMMIT_BYTES = 8_000_000
"""Files are committed in groups of about this many bytes: each commit of the full-text
index writes and merges index segments, which cost more than indexing the text itself when
every small file was its own transaction."""

PARALLEL_MIN_BYTES = 4_000_000
"""Files adding up to less are read in this process: starting workers would cost more."""
MAX_READERS = 4
"""Past this many reading workers, the one process that writes the store is the limit."""
READ_AHEAD_BYTES = 24_000_000
"""How far (in bytes of files) the workers may read ahead of the writer; bounds memory
(at 64 MB the import of big JSONL files was no faster and peaked at 241 MB, not 160 MB)."""
WORKER_FILE_BYTES = 32_000_000
"""A file with more content (decompressed) is read in parts of `PART_BYTES` by the workers
when its format has a run per line (`ReadsLineRanges`), else in this process while it is
stored, run by run; it is never held whole."""
PART_BYTES = 8_000_000
ALL_HERE = "add --workers 0 to read every file in this process"


class _Encoded(NamedTuple):
    """A run ready for the store, and what its importer could not read of it."""

    run: EncodedTrajectory
    warnings: tuple[str, ...] = ()


_Runs = Iterable[_Encoded] | str
"""A file's encoded runs, or why the file cannot be imported."""
_Read = list[_Encoded] | str


def import_jobs(
    store: Store,
    jobs: list[tuple[Path, Importer]],
    report: ImportReport,
    on_file: Callable[[FileResult], None] | None = None,
    overrides: SourceOverrides | None = None,
    workers: int | None = None,
) -> ImportReport:
    """Run planned (path, importer) jobs, adding one `FileResult` per file to `report`.

    Each file is all or nothing (its own savepoint); files are committed in groups
    (`COMMIT_BYTES`), and a file is reported (`on_file`) once its group has committed.
    `workers` processes read, validate and serialize files ahead of this process, which
    writes the store (default: one per usable core but one, at most `MAX_READERS`, when the
    files add up to `PARALLEL_MIN_BYTES`; 0 reads every file here).
    """
    overrides = overrides or SourceOverrides()
    sizes = [_file_size(path) for path, _ in jobs]
    if workers is None:
        workers = default_readers(sizes)
    with store.bulk_writes(), _read_ahead(jobs, sizes, overrides, workers) as runs_of_files:
        for group in _commit_groups(jobs, sizes):
            with store.transaction():
                results = [
                    _store_file(store, path, imp, next(runs_of_files), overrides)
                    for path, imp in group
                ]
            for result in results:
                report.files.append(result)
                if on_file:
                    on_file(result)
    return report


def default_readers(sizes: list[int]) -> int:
    """Reading workers for files of these sizes: none for a small import, a single file
    that is read whole anyway, or a single core."""
    shared = len(sizes) > 1 or (bool(sizes) and sizes[0] > WORKER_FILE_BYTES)
    if not shared or sum(sizes) < PARALLEL_MIN_BYTES:
        return 0
    return max(0, min(MAX_READERS, usable_cores() - 1))


@contextmanager
def _read_ahead(
    jobs: list[tuple[Path, Importer]], sizes: list[int], overrides: SourceOverrides, workers: int
) -> Iterator[Iterator[_Runs]]:
    """Each job's runs in job order: read here as they are stored, or by `workers` processes
    ahead of time (pending reads are cancelled when the import stops early)."""
    if workers < 1:
        yield (_read_here(path, imp, overrides) for path, imp in jobs)
        return
    try:
        with spool() as results, worker_pool(workers, initializer=ignore_interrupts) as pool:
            yield _ReadAhead(pool, results, jobs, sizes, overrides).runs_of_files()
    except SpoolError as exc:
        raise UserError(
            f"import stopped: {exc}, or {ALL_HERE}. The runs committed so far are kept"
        ) from None


class _Piece(NamedTuple):
    """What one worker task reads: a whole file (`lines` None) or a range of its lines; or,
    `here`, a file this process reads itself while storing it."""

    job: int
    lines: LineRange | None
    size: int
    here: bool = False


def _pieces(jobs: list[tuple[Path, Importer]], sizes: list[int]) -> Iterator[_Piece]:
    for index, ((path, imp), size) in enumerate(zip(jobs, sizes, strict=True)):
        if size <= WORKER_FILE_BYTES:
            yield _Piece(index, None, size)
        elif isinstance(imp, ReadsLineRanges) and path.suffix != ".gz":
            for lines in _line_ranges(path):
                yield _Piece(index, lines, (lines.stop or size) - lines.start)
        else:
            yield _Piece(index, None, 0, here=True)


def _line_ranges(path: Path) -> list[LineRange]:
    try:
        return line_ranges(path, PART_BYTES)
    except OSError:
        return [WHOLE_FILE]  # reading it will report why


class _ReadAhead:
    """Pieces of the files handed to the workers in file order, at most `READ_AHEAD_BYTES`
    ahead of the file being stored. Their runs come back as files (`results`): through the
    pool's pipe, a worker waited until this busy process had taken each part's runs."""

    def __init__(
        self,
        pool: Executor,
        results: Spool,
        jobs: list[tuple[Path, Importer]],
        sizes: list[int],
        overrides: SourceOverrides,
    ) -> None:
        self.pool, self.results, self.jobs, self.overrides = pool, results, jobs, overrides
        self.pieces = _pieces(jobs, sizes)
        self.queued: deque[tuple[_Piece, Future[str] | None]] = deque()
        self.held = 0

    def runs_of_files(self) -> Iterator[_Runs]:
        for index, (path, imp) in enumerate(self.jobs):
            piece, future = self._next_piece(index)
            if future is None:
                yield _read_here(path, imp, self.overrides)
            elif piece.lines is None:
                yield self._result(future, path)
            else:
                yield self._parts(index, future, path)

    def _parts(self, index: int, future: Future[str], path: Path) -> Iterator[_Encoded]:
        """The runs of a file read in parts; a part that fails fails the file."""
        while True:
            runs = self._result(future, path)
            if isinstance(runs, str):
                raise UserError(runs)
            yield from runs
            self._fill()
            if not self.queued or self.queued[0][0].job != index:
                return
            _, next_future = self._next_piece(index)
            assert next_future is not None  # parts are read by the workers
            future = next_future

    def _next_piece(self, index: int) -> tuple[_Piece, Future[str] | None]:
        """The next piece of file `index` (parts left of a file that failed are dropped)."""
        while True:
            self._fill()
            piece, future = self.queued.popleft()
            self.held -= piece.size
            if piece.job == index:
                return piece, future
            if future is not None:
                future.cancel()

    def _fill(self) -> None:
        while not self.queued or self.held < READ_AHEAD_BYTES:
            piece = next(self.pieces, None)
            if piece is None:
                return
            future = None
            if not piece.here:
                path, imp = self.jobs[piece.job]
                future = self.results.submit(
                    self.pool, _read_piece, path, imp, piece.lines, self.overrides
                )
            self.queued.append((piece, future))
            self.held += piece.size

    def _result(self, future: Future[str], path: Path) -> _Read:
        try:
            return self.results.result(future)
        except BrokenProcessPool as exc:
            raise UserError(
                f"import stopped: the worker process reading {path} died ({exc}). The runs "
                f"committed so far are kept, and importing the same paths again adds only "
                f"the rest; {ALL_HERE}"
            ) from None


def _read_piece(
    path: Path, imp: Importer, lines: LineRange | None, overrides: SourceOverrides
) -> _Read:
    """Every run of a file (or of a range of its lines), encoded, or why the file cannot be
    imported (in a worker)."""
    try:
        return _read_runs(path, imp, lines, overrides)
    except UserError as exc:
        if lines is not None and lines.first_line is None:
            return _numbered_failure(path, imp, lines, overrides) or str(exc)
        return str(exc)
    finally:
        forget_cached(path, lines or WHOLE_FILE)


def _read_runs(
    path: Path, imp: Importer, lines: LineRange | None, overrides: SourceOverrides
) -> list[_Encoded]:
    if lines is None:
        return list(_encoded_runs(path, imp.read(path), overrides))
    assert isinstance(imp, ReadsLineRanges)
    first = f"from line {lines.first_line}, run " if lines.first_line else "run "
    return list(_encoded_runs(path, imp.read_lines(path, lines), overrides, first))


def _numbered_failure(
    path: Path, imp: Importer, lines: LineRange, overrides: SourceOverrides
) -> str | None:
    """Why a part failed, its lines numbered from the start of the file: they were not
    counted (that reads everything before the part), so the part is read again to say so."""
    numbered = lines._replace(first_line=lines_before(path, lines.start) + 1)
    try:
        _read_runs(path, imp, numbered, overrides)
    except UserError as exc:
        return str(exc)
    return None


def _read_here(path: Path, imp: Importer, overrides: SourceOverrides) -> Iterator[_Encoded]:
    """A file's encoded runs, read in this process as they are stored."""
    yield from _encoded_runs(path, imp.read(path), overrides)
    forget_cached(path)


def _encoded_runs(
    path: Path, trajs: Iterable[Trajectory], overrides: SourceOverrides, first: str = ""
) -> Iterator[_Encoded]:
    """The runs encoded with their import warnings, whatever their format: a run with no
    messages, or one too deeply nested to store, is an `InputError` naming it by its index
    (`first`: where the runs start, when they are a part of the file)."""
    runs = _Counted(overrides.apply(trajs))
    try:
        for traj in runs:
            if not traj.messages:
                raise InputError(str(path), EMPTY_RUN, _record(first, runs.count))
            warnings = traj.metadata.get(IMPORT_WARNINGS) or ()
            yield _Encoded(encode(traj), tuple(map(str, warnings)))
    except (PydanticSerializationError, RecursionError):
        problem = "cannot store the run: a value is nested too deeply"
        raise InputError(str(path), problem, _record(first, runs.count)) from None


EMPTY_RUN = "the run has no messages: nothing to import (a run is at least one message)"


def _record(first: str, count: int) -> str | int:
    """The record index of the `count`-th run, as `_encoded_runs` names it."""
    return f"{first}{count - 1}" if first else count - 1


def _store_file(
    store: Store, path: Path, imp: Importer, runs: _Runs, overrides: SourceOverrides
) -> FileResult:
    result = FileResult(path=str(path), format=imp.name)
    if isinstance(runs, str):
        result.error = runs
        return result
    update = MetadataUpdate(model=overrides.model, run=overrides.run)
    actor = Actor(getpass.getuser(), overrides.command())
    try:
        with store.savepoint():
            for encoded in runs:
                _add_warnings(result, encoded.warnings)
                if store.add_encoded(encoded.run):
                    result.added += 1
                    continue
                result.duplicates += 1
                if not update.is_empty():
                    traj_id = encoded.run.id
                    _fill(result, fill_unknown(store, traj_id, update, actor), traj_id)
    except StoreFull:
        raise  # not this file's fault: the import stops
    except UserError as exc:
        return FileResult(path=str(path), format=imp.name, error=str(exc))
    return result


def _add_warnings(result: FileResult, warnings: tuple[str, ...]) -> None:
    for warning in warnings:
        if warning not in result.warnings:
            result.warnings.append(warning)


def _fill(result: FileResult, done: Filled, traj_id: str) -> None:
    result.filled += bool(done.filled)
    result.filled_fields = sorted({*result.filled_fields, *done.filled})
    if done.kept:
        result.kept.append(traj_id)
        result.kept_fields = sorted({*result.kept_fields, *done.kept})


def _commit_groups(
    jobs: list[tuple[Path, Importer]], sizes: list[int]
) -> Iterator[list[tuple[Path, Importer]]]:
    group: list[tuple[Path, Importer]] = []
    group_bytes = 0
    for job, size in zip(jobs, sizes, strict=True):
        group.append(job)
        group_bytes += size
        if group_bytes >= COMMIT_BYTES:
            yield group
            group, group_bytes = [], 0
    if group:
        yield group


def _file_size(path: Path) -> int:
    """The size of the file's content (decompressed, for `.gz`)."""
    try:
        return data_size(path)
    except OSError:
        return 0  # reading it will report why


class _Counted(Iterator[Trajectory]):
    """An iterator that counts what it has given (to name the run a store error is about)."""

    def __init__(self, items: Iterable[Trajectory]) -> None:
        self._items = iter(items)
        self.count = 0

    def __next__(self) -> Trajectory:
        item = next(self._items)
        self.count += 1
        return item


def _detect(path: Path, fmt: str | None) -> Importer | None:
    return detect_format(path) if fmt is None else require_format(path, fmt)
