"""Exporters: write stored trajectories in the formats analytics tools and trainers read.

Each exporter is a function `(trajectories, out_path) -> number written`, registered by name.
"""

from trajforge.export.registry import EXPORTERS, export

__all__ = ["EXPORTERS", "export"]
