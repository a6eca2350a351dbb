"""Registries by name, with a dotted-path escape hatch and a helpful error."""

from __future__ import annotations

import importlib
from typing import Any, Generic, TypeVar

from trajforge.errors import UserError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps short names to dotted paths (`module:attr`) loaded on first use.

    `get("name")` loads a registered entry; `get("package.module:attr")` loads any object by
    its path. An unknown name raises a `UserError` that lists the known names.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._paths: dict[str, str] = {}
        self._loaded: dict[str, T] = {}

    def register(self, name: str, path: str) -> None:
        self._paths[name] = path

    def add(self, name: str, obj: T) -> None:
        """Register an already-loaded object."""
        self._paths[name] = f"<object {name}>"
        self._loaded[name] = obj

    def names(self) -> list[str]:
        return sorted(self._paths)

    def get(self, name: str) -> T:
        if name in self._loaded:
            return self._loaded[name]
        path = self._paths.get(name)
        if path is None and ":" not in name:
            known = ", ".join(self.names()) or "(none)"
            raise UserError(f"unknown {self.kind} '{name}'; known: {known}")
        obj: T = _load_path(path or name, self.kind)
        self._loaded[name] = obj
        return obj


def _load_path(path: str, kind: str) -> Any:
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
        return getattr(module, attr)
    except (ImportError, AttributeError) as exc:
        raise UserError(f"cannot load {kind} from '{path}': {exc}") from exc
