"""The exporter registry."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from trajforge.registry import Registry
from trajforge.schema import Trajectory

Exporter = Callable[[Iterable[Trajectory], Path], int]

EXPORTERS: Registry[Exporter] = Registry("export format")
EXPORTERS.register("jsonl", "trajforge.export.tables:write_jsonl")
EXPORTERS.register("parquet", "trajforge.export.tables:write_parquet")
EXPORTERS.register("rl", "trajforge.export.rl:write_rl")


def export(fmt: str, trajs: Iterable[Trajectory], out: Path) -> int:
    """Write `trajs` to `out` in format `fmt`; returns how many were written."""
    return EXPORTERS.get(fmt)(trajs, out)
