"""Options, output and error handling shared by the CLI commands."""

from __future__ import annotations

import functools
import io
import os
import sqlite3
import sys
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Annotated, Any, NoReturn, ParamSpec, TypeVar

import orjson
import typer
from rich.console import Console

from trajforge.errors import UserError
from trajforge.store import Store, default_db_path
from trajforge.store.parquet import RunRows

console = Console()
err_console = Console(stderr=True)

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C")

DbOption = Annotated[
    Path | None,
    typer.Option(
        "--db",
        envvar="TRAJFORGE_DB",
        help="SQLite store file (default ./trajforge.db, or $TRAJFORGE_DB).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def open_store(db: Path | None, must_exist: bool = True) -> Store:
    """Open the store; a missing file is a clear error for read-only commands."""
    path = db or default_db_path()
    if must_exist and not path.exists():
        raise UserError(f"no store at {path}; import something first (trajforge import PATH)")
    return Store(path)


ParquetOption = Annotated[
    Path | None,
    typer.Option(
        "--parquet",
        help="Read the runs from this folder of Parquet shards (export --shard-rows) with "
        "DuckDB instead of the store.",
    ),
]


def open_runs(db: Path | None, parquet: Path | None) -> AbstractContextManager[RunRows]:
    """Where `ls` and `stats` read summary rows: the store, or Parquet shards when given
    (a `--db` other than $TRAJFORGE_DB given as well is an error)."""
    if parquet is not None and db is not None and str(db) != os.environ.get("TRAJFORGE_DB"):
        raise UserError("give --db or --parquet, not both: they are two sources of runs")
    if parquet is not None:
        from trajforge.store.parquet import ParquetRuns

        return ParquetRuns(parquet)
    return open_store(db)


def print_json(value: Any) -> None:
    """Print a JSON document to stdout."""
    sys.stdout.write(_json_text(value) + "\n")


def print_json_items(items: Iterable[Any]) -> None:
    """Print a JSON array to stdout an item at a time: the same text as `print_json` of
    the list, without holding the list."""
    first = True
    for item in items:
        sys.stdout.write(("[\n  " if first else ",\n  ") + _json_text(item).replace("\n", "\n  "))
        first = False
    sys.stdout.write("[]\n" if first else "\n]\n")


def _json_text(value: Any) -> str:
    """`value` as JSON indented by two spaces (line breaks inside strings are escaped, so
    every line break in the text is the layout's)."""
    option = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
    try:
        data = orjson.dumps(value, option=option)
    except orjson.JSONEncodeError:  # a string that is not UTF-8, such as an odd file name
        data = orjson.dumps(_printable(value), option=option)
    return data.decode()


def _printable(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode()  # as the output streams
    if isinstance(value, dict):
        return {_printable(k): _printable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_printable(v) for v in value]
    return value


def guarded(func: Callable[P, R]) -> Callable[P, R]:
    """Turn a `UserError` (or a store that SQLite cannot read or write) into one line on
    stderr and exit status 1.

    Output streams replace what they cannot encode (a file name that is not UTF-8 shows
    as `\\udcXX` escapes) instead of failing half-way through a summary.
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        tolerant_output()
        try:
            return func(*args, **kwargs)
        except UserError as exc:
            fail(str(exc))
        except sqlite3.DatabaseError as exc:
            fail(f"the store cannot be used: {exc}")

    return wrapper


def config_from_options(
    config: Callable[..., C], flags: dict[str, str] | None = None, **options: Any
) -> C:
    """`config(**options)`; a value the config model refuses is a `UserError` naming the
    flag (`--save-every 0: must be greater than or equal to 1`). `flags` maps the fields
    whose flag is not `--field-name`."""
    from pydantic import ValidationError

    try:
        return config(**options)
    except ValidationError as exc:
        error = exc.errors()[0]
        problem = error["msg"].removeprefix("Value error, ").replace("Input should be", "must be")
        if not error["loc"]:
            raise UserError(problem) from None
        field = str(error["loc"][0])
        flag = (flags or {}).get(field) or "--" + field.replace("_", "-")
        raise UserError(f"{flag} {options.get(field)}: {problem}") from None


MAX_ERROR_LINE = 2000


def fail(message: str) -> NoReturn:
    """Print `error: message` as one line on stderr and exit with status 1."""
    line = " ".join(message.split("\n"))
    if len(line) > MAX_ERROR_LINE:
        line = f"{line[:MAX_ERROR_LINE]}... ({len(line)} characters in all)"
    err_console.print(f"error: {line}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def tolerant_output() -> None:
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
