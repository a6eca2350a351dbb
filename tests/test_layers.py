"""The package's shape: layers, no cycles between subpackages, SQL only in the store.

Layer order, lowest first (a module may import only from its own layer or a lower one):

    0  core      schema, errors, registry, jsonfile, openai_wire, outputs, version, faultspec
                 (top-level modules)
    1  store
    2  importers, models
    3  envs
    4  agents
    5  rollout
    6  diagnose, monitor, generate, evaluate, export, strategies
    7  proxy, serve
    8  train, web
    9  cli, demo
   10  the package `__init__`: the public API, re-exporting from every layer

Imports are read with `ast` from every module under src/trajforge, including imports inside
functions and `TYPE_CHECKING` blocks: a deferred import is still a dependency.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "trajforge"

LAYERS: list[set[str]] = [
    {
        "schema",
        "errors",
        "registry",
        "jsonfile",
        "openai_wire",
        "outputs",
        "version",
        "faultspec",
        "processes",
        "progress",
    },
    {"store"},
    {"importers", "models"},
    {"envs"},
    {"agents"},
    {"rollout"},
    {"diagnose", "monitor", "generate", "evaluate", "export", "strategies"},
    {"proxy", "serve"},
    {"train", "web"},
    {"cli", "demo", "__main__"},
    {"__init__"},  # the package's public API: re-exports from every layer, imported by none
]
LAYER_OF = {name: index for index, layer in enumerate(LAYERS) for name in layer}

# Same-layer imports that are forbidden all the same: models are clients, not readers of
# foreign formats; the proxy forwards to real upstreams and never to the mock models.
FORBIDDEN: set[tuple[str, str]] = {
    ("models", "trajforge.importers"),
    ("proxy", "trajforge.models.mock_"),
}

# Known violations still being removed: (importing module, imported subpackage or module).
# These lists only shrink.
ALLOWED_UPWARD: set[tuple[str, str]] = set()
ALLOWED_CYCLE_EDGES: set[tuple[str, str]] = set()
ALLOWED_FORBIDDEN: set[tuple[str, str]] = set()
ALLOWED_SQL: set[str] = set()


def _unit(module: str) -> str:
    """`trajforge.rollout.fork` -> `rollout`; `trajforge.schema` -> `schema`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1] if len(parts) > 2 else [*parts[:-1], "__init__"]
    return ".".join(parts)


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str | None:
    if node.level == 0:
        return node.module
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _modules() -> list[tuple[str, Path]]:
    return [
        (_module_name(path), path)
        for path in sorted(SRC.rglob("*.py"))
        if "data" not in path.relative_to(SRC).parts[:1]
    ]


def import_edges() -> list[tuple[str, str]]:
    """(importing module, imported trajforge module) for every import in the package."""
    edges = []
    for module, path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                resolved = _resolve(node, module, path.name == "__init__.py")
                targets = [resolved] if resolved else []
            else:
                continue
            edges += [
                (module, t) for t in targets if t == "trajforge" or t.startswith("trajforge.")
            ]
    return edges


def unit_graph(skip: set[tuple[str, str]] = frozenset()) -> dict[str, set[str]]:
    """Subpackage -> subpackages it imports, leaving out (module, subpackage) pairs in `skip`."""
    graph: dict[str, set[str]] = defaultdict(set)
    for source, target in import_edges():
        a, b = _unit(source), _unit(target)
        if a != b and (source, b) not in skip:
            graph[a].add(b)
    return graph


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of subpackages that import each other, directly or through others."""
    reach = {node: _reach(graph, node) for node in graph}
    groups = {
        tuple(sorted(other for other in reach if other in reach[node] and node in reach[other]))
        for node in reach
        if node in reach[node]
    }
    return sorted(list(group) for group in groups)


def upward_imports() -> set[tuple[str, str]]:
    found = set()
    for source, target in import_edges():
        a, b = _unit(source), _unit(target)
        if LAYER_OF[b] > LAYER_OF[a]:
            found.add((source, b))
    return found


def forbidden_imports() -> set[tuple[str, str]]:
    return {
        (source, target)
        for source, target in import_edges()
        for unit, prefix in FORBIDDEN
        if _unit(source) == unit and target.startswith(prefix)
    }


def sql_writers() -> set[str]:
    """Modules outside store/ that call `.execute(`/`.executemany(`/`.executescript(`."""
    found = set()
    for module, path in _modules():
        if _unit(module) == "store":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"execute", "executemany", "executescript"}
            ):
                found.add(module)
    return found


def test_every_subpackage_has_a_layer():
    units = {_unit(module) for module, _ in _modules()}
    missing = sorted(units - set(LAYER_OF))
    assert not missing, f"subpackages without a layer (add them to LAYERS): {missing}"


def test_no_cycles_between_subpackages():
    assert cycles(unit_graph(skip=ALLOWED_UPWARD | ALLOWED_CYCLE_EDGES)) == []


def test_no_forbidden_imports():
    new = sorted(forbidden_imports() - ALLOWED_FORBIDDEN)
    assert not new, "forbidden imports:\n" + "\n".join(f"  {a} -> {b}" for a, b in new)
    stale = sorted(ALLOWED_FORBIDDEN - forbidden_imports())
    assert not stale, f"fixed imports still allowed (remove them): {stale}"


def test_no_import_from_a_lower_layer_to_a_higher_one():
    new = sorted(upward_imports() - ALLOWED_UPWARD)
    assert not new, "upward imports:\n" + "\n".join(f"  {a} -> {b}" for a, b in new)


def test_allow_lists_have_no_stale_entries():
    stale = sorted(ALLOWED_UPWARD - upward_imports())
    assert not stale, f"fixed violations still allowed (remove them): {stale}"
    edges = {(source, _unit(target)) for source, target in import_edges()}
    stale = sorted(ALLOWED_CYCLE_EDGES - edges)
    assert not stale, f"removed edges still allowed (remove them): {stale}"


def test_sql_is_written_only_in_the_store():
    new = sorted(sql_writers() - ALLOWED_SQL)
    assert not new, f"execute( outside store/: {new}"
    stale = sorted(ALLOWED_SQL - sql_writers())
    assert not stale, f"fixed SQL writers still allowed (remove them): {stale}"


def test_the_checker_sees_a_cycle_and_an_upward_edge():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
