"""The exporter registry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trajforge.registry import Registry
from trajforge.store import Store, TrajectoryFilter

Exporter = Callable[[Store, TrajectoryFilter, Path], int]

EXPORTERS: Registry[Exporter] = Registry("export format")
EXPORTERS.register("jsonl", "trajforge.export.tables:write_jsonl")
EXPORTERS.register("parquet", "trajforge.export.tables:write_parquet")
EXPORTERS.register("rl", "trajforge.export.rl:export_rl")
EXPORTERS.register("atif", "trajforge.export.atif:write_atif")


def export(fmt: str, store: Store, out: Path, flt: TrajectoryFilter | None = None) -> int:
    """Write the stored trajectories `flt` selects to `out` in format `fmt`; returns how many
    were written."""
    return EXPORTERS.get(fmt)(store, flt or TrajectoryFilter(), out)
