"""The exporter registry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from trajforge.errors import UserError
from trajforge.importers.registry import IMPORTERS
from trajforge.registry import Registry
from trajforge.store import Store, TrajectoryFilter

Exporter = Callable[[Store, TrajectoryFilter, Path], int]

EXPORTERS: Registry[Exporter] = Registry("export format", "trajforge.exporters")
"""Built-in formats, and those installed packages add through entry points of the group
`trajforge.exporters` (`name = "module:function"`, a function like `Exporter`)."""
EXPORTERS.register("jsonl", "trajforge.export.tables:write_jsonl")
EXPORTERS.register("parquet", "trajforge.export.tables:write_parquet")
EXPORTERS.register("rl", "trajforge.export.rl:export_rl")
EXPORTERS.register("atif", "trajforge.export.atif:write_atif")
EXPORTERS.register("sft", "trajforge.export.training:export_sft")
EXPORTERS.register("openai", "trajforge.export.training:export_openai")
EXPORTERS.register("dpo", "trajforge.export.training:export_dpo")

WRITTEN = {"sft": "training rows", "openai": "conversations", "dpo": "preference pairs"}
"""What an exporter's count counts, where it is not trajectories."""
BY_FORM = {"sft"}
"""Formats written as one file per training-row form beside the output name."""


def written_files(fmt: str, out: Path) -> list[Path]:
    """The files an export to `out` in format `fmt` wrote."""
    if fmt not in BY_FORM:
        return [out]
    from trajforge.generate.rows import ROW_MODELS, form_path

    return [path for form in ROW_MODELS if (path := form_path(out, form)).is_file()]


def export(
    fmt: str,
    store: Store,
    out: Path,
    flt: TrajectoryFilter | None = None,
    shard_rows: int | None = None,
) -> int:
    """Write the stored trajectories `flt` selects to `out` in format `fmt`; returns how many
    were written. `shard_rows` (Parquet only): a folder of files of at most that many runs."""
    if shard_rows is None:
        return EXPORTERS.get(fmt)(store, flt or TrajectoryFilter(), out)
    if fmt != "parquet":
        raise UserError(f"--shard-rows is for --format parquet, not {fmt}")
    from trajforge.export.tables import write_parquet_shards

    return write_parquet_shards(store, flt or TrajectoryFilter(), out, shard_rows)


class InstalledFormat(NamedTuple):
    """A format trajforge can import or export, and where it came from."""

    direction: str
    """`import` or `export`."""
    name: str
    path: str
    """The importer class or exporter function (`module:attr`)."""
    origin: str
    """`trajforge` (built in) or the distribution and version of the plug-in."""
    shadowed: bool = False
    """A plug-in's name that a built-in format already has (the built-in one is used)."""


def installed_formats() -> list[InstalledFormat]:
    """Every import and export format: built-in ones, then plug-ins' (entry points), then
    plug-ins' names that a built-in name shadows."""
    found = []
    for direction, registry in (("import", IMPORTERS), ("export", EXPORTERS)):
        found += [InstalledFormat(direction, *entry) for entry in registry.entries()]
        found += [InstalledFormat(direction, *e, shadowed=True) for e in registry.shadowed]
    return found
