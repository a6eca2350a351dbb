"""Importers: one module per file format, a registry, and format detection.

Each importer documents how its dataset's step numbers map to message indices.
"""

from trajforge.importers.base import Importer
from trajforge.importers.pipeline import FileResult, ImportReport, import_paths
from trajforge.importers.registry import IMPORTERS, detect_format, importer

__all__ = [
    "IMPORTERS",
    "FileResult",
    "ImportReport",
    "Importer",
    "detect_format",
    "import_paths",
    "importer",
]
