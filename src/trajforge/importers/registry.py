"""The importer registry and format detection."""

from __future__ import annotations

from pathlib import Path

from trajforge.errors import UnknownFormatError
from trajforge.importers.base import HEAD_BYTES, Importer, read_head, read_skeleton
from trajforge.jsonfile import compression_of
from trajforge.registry import Registry

IMPORTERS: Registry[type[Importer]] = Registry("import format", "trajforge.importers")
"""Built-in formats, and those installed packages add through entry points of the group
`trajforge.importers` (`name = "module:ImporterClass"`)."""

# Detection order matters: formats recognized by their own markers first, generic ones last.
# Formats of installed plug-ins are tried after these (`detection_order`), so a plug-in
# never takes a file a built-in format reads; `--format NAME` picks one directly.
DETECTION_ORDER: list[str] = [
    "trajforge",
    "mini-swe-agent",
    "swe-agent",
    "tau2-bench",
    "tau-bench",
    "who-and-when",
    "inspect",
    "atif",
    "openhands",
    "openai-chat",
]
IMPORTERS.register("trajforge", "trajforge.importers.trajforge_jsonl:TrajforgeJsonlImporter")
IMPORTERS.register("mini-swe-agent", "trajforge.importers.mini_swe_agent:MiniSweAgentImporter")
IMPORTERS.register("swe-agent", "trajforge.importers.swe_agent:SweAgentImporter")
IMPORTERS.register("inspect", "trajforge.importers.inspect_ai:InspectImporter")
IMPORTERS.register("atif", "trajforge.importers.atif:AtifImporter")
IMPORTERS.register("openhands", "trajforge.importers.openhands:OpenHandsImporter")
IMPORTERS.register("tau2-bench", "trajforge.importers.tau2_bench:Tau2BenchImporter")
IMPORTERS.register("tau-bench", "trajforge.importers.tau_bench:TauBenchImporter")
IMPORTERS.register("who-and-when", "trajforge.importers.who_and_when:WhoAndWhenImporter")
IMPORTERS.register("openai-chat", "trajforge.importers.openai_chat:OpenAIChatImporter")


def importer(name: str) -> Importer:
    """An importer instance by format name (or dotted path `module:Class`)."""
    return IMPORTERS.get(name)()


def detection_order() -> list[str]:
    """The built-in formats in `DETECTION_ORDER`, then installed plug-ins' formats."""
    extra = [n for n in IMPORTERS.plugin_names() if n not in DETECTION_ORDER]
    return DETECTION_ORDER + extra


_DETECTORS: dict[str, Importer] = {}
"""One instance of each format for detection, which asks every format about every file."""


def all_importers() -> list[Importer]:
    """One instance of each format, in detection order (the same ones each call)."""
    order = detection_order()
    if len(_DETECTORS) != len(order):
        _DETECTORS.update((name, importer(name)) for name in order if name not in _DETECTORS)
    return [_DETECTORS[name] for name in order]


def detect_format(path: Path) -> Importer | None:
    """The first importer that recognizes `path`, or None.

    Importers decide from the file's first bytes; a JSON document longer than those is
    looked at again through its skeleton (`read_skeleton`), so a valid file is never missed
    because its telling keys come after a long value.
    """
    head = read_head(path)
    found = _first_detecting(path, head)
    if found is not None or len(head) < HEAD_BYTES or head.lstrip()[:1] not in (b"{", b"["):
        return found
    skeleton = read_skeleton(path)
    return None if skeleton is None else _first_detecting(path, skeleton)


def _first_detecting(path: Path, head: bytes) -> Importer | None:
    for candidate in all_importers():
        if candidate.detect(path, head):
            return candidate
    return None


def require_format(path: Path, fmt: str | None = None) -> Importer:
    """The importer for `path` (forced by `fmt` when given); error lists known formats."""
    if fmt is not None:
        return importer(fmt)
    found = detect_format(path)
    if found is None:
        _refuse_compressed(path)
        known = ", ".join(f"{i.name} ({i.description})" for i in all_importers())
        raise UnknownFormatError(f"{path}: unrecognized format; trajforge reads: {known}")
    return found


def _refuse_compressed(path: Path) -> None:
    """A compressed file that is not read as such gets an error that names the fix."""
    compression = compression_of(read_head(path, 8))
    if compression is None:
        return
    if compression == "gzip":
        fix = f"name it {path.name}.gz to have it decompressed"
    else:
        fix = f"decompress it first (trajforge reads gzip files named .gz, not {compression})"
    raise UnknownFormatError(f"{path}: compressed with {compression}; {fix}")
