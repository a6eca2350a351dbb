"""Importing files and folders into a store: each file all or nothing, committed in groups."""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from pydantic import BaseModel, Field
from pydantic_core import PydanticSerializationError

from trajforge.errors import InputError, UserError
from trajforge.importers.base import Importer
from trajforge.importers.registry import detect_format, require_format
from trajforge.schema import Trajectory
from trajforge.store import Store


class FileResult(BaseModel):
    """What happened to one file."""

    path: str = Field(description="The file, as given or found.")
    format: str | None = Field(default=None, description="Format it was read as.")
    added: int = Field(default=0, description="Trajectories added to the store.")
    duplicates: int = Field(default=0, description="Trajectories already in the store.")
    error: str | None = Field(default=None, description="Why the file failed (nothing added).")


class SourceOverrides(BaseModel):
    """Source fields to set on every imported trajectory (for files that do not name them)."""

    model: str | None = Field(default=None, description="Model that drove the agent.")
    run: str | None = Field(default=None, description="Run or experiment name.")

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
    paths: Iterable[str], fmt: str | None = None
) -> tuple[list[tuple[Path, Importer]], ImportReport]:
    """Decide the importer of each file; returns ([(path, importer)], report-so-far).

    Explicit files must be recognized (else a UserError); unrecognized files found in folders
    are listed as not trajectories, unreadable ones as failed. Sidecars claimed by a
    recognized file are consumed.
    """
    explicit, in_folders = expand(paths)
    report = ImportReport()
    jobs = [(p, require_format(p, fmt)) for p in explicit]
    candidates = []
    for path in in_folders:
        try:
            if file_kind(path) not in ("file", "missing"):
                report.special_files.append(str(path))
                continue
            candidates.append((path, _detect(path, fmt)))
        except UserError as exc:
            report.files.append(FileResult(path=str(path), error=str(exc)))
    jobs.extend((p, imp) for p, imp in candidates if imp is not None)
    claimed = {os.path.abspath(s) for p, imp in jobs for s in imp.sidecars(p)}
    for path, imp in candidates:
        if imp is None:
            claimed_here = os.path.abspath(path) in claimed
            (report.sidecars if claimed_here else report.not_trajectories).append(str(path))
    return jobs, report


def import_paths(
    store: Store,
    paths: Iterable[str],
    fmt: str | None = None,
    on_file: Callable[[FileResult], None] | None = None,
    overrides: SourceOverrides | None = None,
) -> ImportReport:
    """Import files, folders and globs; each file commits alone or not at all."""
    jobs, report = plan(paths, fmt)
    return import_jobs(store, jobs, report, on_file, overrides)


COMMIT_BYTES = 8_000_000
"""Files are committed in groups of about this many bytes: each commit of the full-text
index writes and merges index segments, which cost more than indexing the text itself when
every small file was its own transaction."""


def import_jobs(
    store: Store,
    jobs: list[tuple[Path, Importer]],
    report: ImportReport,
    on_file: Callable[[FileResult], None] | None = None,
    overrides: SourceOverrides | None = None,
) -> ImportReport:
    """Run planned (path, importer) jobs, adding one `FileResult` per file to `report`.

    Each file is all or nothing (its own savepoint); files are committed in groups
    (`COMMIT_BYTES`), and a file is reported (`on_file`) once its group has committed.
    """
    overrides = overrides or SourceOverrides()
    with store.bulk_writes():
        for group in _commit_groups(jobs):
            with store.transaction():
                results = [_import_file(store, path, imp, overrides) for path, imp in group]
            for result in results:
                report.files.append(result)
                if on_file:
                    on_file(result)
    return report


def _import_file(store: Store, path: Path, imp: Importer, overrides: SourceOverrides) -> FileResult:
    result = FileResult(path=str(path), format=imp.name)
    runs = _Counted(overrides.apply(imp.read(path)))
    try:
        with store.savepoint():
            result.added, result.duplicates = store.add_many(runs)
    except UserError as exc:
        result.error = str(exc)
    except (PydanticSerializationError, RecursionError):
        problem = "cannot store the run: a value is nested too deeply"
        result.error = str(InputError(str(path), problem, runs.count - 1))
    return result


def _commit_groups(
    jobs: list[tuple[Path, Importer]],
) -> Iterator[list[tuple[Path, Importer]]]:
    group: list[tuple[Path, Importer]] = []
    size = 0
    for path, imp in jobs:
        group.append((path, imp))
        size += _file_size(path)
        if size >= COMMIT_BYTES:
            yield group
            group, size = [], 0
    if group:
        yield group


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
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
