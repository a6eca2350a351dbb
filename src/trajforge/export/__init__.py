"""Exporters: write stored trajectories in the formats analytics tools and trainers read.

Each exporter is a function `(store, filter, out_path) -> number written`, registered by name;
exporters read the store directly so they can copy stored bytes and columns.
"""

from trajforge.export.registry import EXPORTERS, export

__all__ = ["EXPORTERS", "export"]
