"""Registries by name, with a dotted-path escape hatch, plug-ins and a helpful error."""

from __future__ import annotations

import importlib
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, NamedTuple, TypeVar

from trajforge.errors import UserError

T = TypeVar("T")

BUILT_IN = "trajforge"


class Entry(NamedTuple):
    """A registered name: where its object is (`module:attr`) and who provided it."""

    name: str
    path: str
    origin: str
    """`trajforge` (built in), or the distribution (and version) whose entry point added it."""


class Registry(Generic[T]):
    """Maps short names to dotted paths (`module:attr`) loaded on first use.

    `get("name")` loads a registered entry; `get("package.module:attr")` loads any object by
    its path. With an `entry_point_group`, installed packages add names through entry
    points of that group (`name = "module:attr"`), read the first time a name is looked
    up or listed; a built-in name is never replaced by a plug-in (the plug-in's entry is
    listed as shadowed). An unknown name raises a `UserError` that lists the known names.
    """

    def __init__(self, kind: str, entry_point_group: str | None = None) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self._paths: dict[str, str] = {}
        self._origins: dict[str, str] = {}
        self._loaded: dict[str, T] = {}
        self._plugins_read = entry_point_group is None
        self._plugins: list[str] = []
        self.shadowed: list[Entry] = []

    def register(self, name: str, path: str, origin: str = BUILT_IN) -> None:
        self._paths[name] = path
        self._origins[name] = origin
        if origin != BUILT_IN and name not in self._plugins:
            self._plugins = sorted([*self._plugins, name])

    def add(self, name: str, obj: T) -> None:
        """Register an already-loaded object."""
        self.register(name, f"<object {name}>")
        self._loaded[name] = obj

    def names(self) -> list[str]:
        self.read_plugins()
        return sorted(self._paths)

    def entries(self) -> list[Entry]:
        """Every registered name with its path and origin, built-in ones first."""
        self.read_plugins()
        names = sorted(self._paths, key=lambda n: (self._origins[n] != BUILT_IN, n))
        return [Entry(n, self._paths[n], self._origins[n]) for n in names]

    def plugin_names(self) -> list[str]:
        """The names installed packages added, in name order (kept as they are registered:
        format detection asks for them for every file)."""
        self.read_plugins()
        return self._plugins

    def read_plugins(self) -> None:
        """Register the entry points of the group (once)."""
        if self._plugins_read:
            return
        self._plugins_read = True
        for point in entry_points(group=self.entry_point_group or ""):
            entry = Entry(point.name, point.value, _distribution(point))
            if point.name in self._paths:
                self.shadowed.append(entry)
            else:
                self.register(*entry)

    def get(self, name: str) -> T:
        if name in self._loaded:
            return self._loaded[name]
        if name not in self._paths:
            self.read_plugins()
        path = self._paths.get(name)
        if path is None and ":" not in name:
            known = ", ".join(self.names()) or "(none)"
            raise UserError(f"unknown {self.kind} '{name}'; known: {known}")
        obj: T = _load_path(path or name, self.kind)
        self._loaded[name] = obj
        return obj


def _distribution(point: EntryPoint) -> str:
    dist = point.dist
    if dist is None:
        return "an entry point"
    return f"{dist.metadata['Name']} {dist.version}"


def _load_path(path: str, kind: str) -> Any:
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
        return getattr(module, attr)
    except Exception as exc:  # a plug-in's module may fail in any way while it loads
        raise UserError(f"cannot load {kind} from '{path}': {exc}") from exc
