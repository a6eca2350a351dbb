"""`trajforge formats`: the import and export formats installed, and where each came from."""

from __future__ import annotations

from rich.table import Table

from trajforge.cli.common import JsonOption, console, print_json
from trajforge.export.registry import installed_formats


def formats_command(json_out: JsonOption = False) -> None:
    """List the formats `import` reads and `export` writes: built in, or added by an
    installed package through the `trajforge.importers` / `trajforge.exporters` entry
    points (any `module:attr` path also works as `--format`)."""
    formats = installed_formats()
    if json_out:
        print_json([f._asdict() for f in formats])
        return
    table = Table("direction", "name", "from", "object")
    for entry in formats:
        origin = f"{entry.origin} (shadowed by the built-in)" if entry.shadowed else entry.origin
        table.add_row(entry.direction, entry.name, origin, entry.path)
    console.print(table)
