"""trajforge: a workbench for learning from LLM-agent failures.

This module is the public Python API (the README's "Python" section shows it at work):

- the trajectory schema: `Trajectory`, `Message`, `ToolCall`, `Task`, `Outcome`, ...;
- the store: `Store`, `TrajectoryFilter`; importing: `import_paths`, `IMPORTERS`;
- environments: `Environment`, `ENVIRONMENTS`, `make_env`; policies: `Policy`, `POLICIES`,
  `AgentSpec`, `PolicyOptions` and `build` (a spec to its policy and user simulator);
- forks and rollouts: `fork`, `ForkOptions`, `RolloutConfig`, `run_batch`, `run_local`,
  `Limits`, `robustness_report`;
- diagnosis: `diagnose_run`, `diagnose_store`, `make_localizer`, `LOCALIZERS`, `Diagnosis`;
- the monitor: `StopHook`, `SessionMonitor`, `DETECTORS`, `load_detector`, `save_detector`;
- strategies: `Strategy`, `distil_store`, `retrieve_for` (more in `trajforge.strategies`);
- exporters: `EXPORTERS` (and `trajforge.export.export(fmt, store, out)`; `trajforge.export`
  is the subpackage, so the function is not repeated here).

Only the schema loads with `import trajforge`; every other name loads its module on first
use, so the command line and light scripts do not pay for numerics or servers. The modules
behind these names are private: import from here or from a subpackage's `__init__`.

Layers, lowest first; a module imports only from its own layer or lower ones, and
subpackages never import each other in a cycle (tests/test_layers.py checks both):

    schema, errors, registry, jsonfile, openai_wire, faultspec
    store
    importers, models
    envs
    agents
    rollout
    diagnose, monitor, generate, evaluate, export, strategies
    proxy, serve
    train, web
    cli, demo
    this module: the public API, above them all (nothing in the package imports it)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from trajforge.schema import (
    FORMAT_VERSION,
    Fault,
    Label,
    LLMCall,
    Message,
    Outcome,
    Source,
    Strategy,
    Task,
    ToolCall,
    Trajectory,
    Usage,
)
from trajforge.version import __version__

if TYPE_CHECKING:
    from trajforge.agents import POLICIES, Policy
    from trajforge.diagnose import LOCALIZERS, Diagnosis, diagnose_run, diagnose_store
    from trajforge.diagnose.run import make_localizer
    from trajforge.envs import ENVIRONMENTS, Environment, make_env
    from trajforge.evaluate import robustness_report
    from trajforge.export import EXPORTERS
    from trajforge.importers import IMPORTERS, ImportReport, import_paths
    from trajforge.monitor import DETECTORS, SessionMonitor, StopHook, load_detector, save_detector
    from trajforge.rollout.backends.local import run_local
    from trajforge.rollout.episode import Limits
    from trajforge.rollout.factory import AgentSpec, PolicyOptions, build
    from trajforge.rollout.fork import ForkOptions, fork
    from trajforge.rollout.runner import BatchSummary, RolloutConfig, run_batch
    from trajforge.store import Store, TrajectoryFilter
    from trajforge.strategies import distil_store, retrieve_for


_LAZY = {
    "trajforge.store": ("Store", "TrajectoryFilter"),
    "trajforge.importers": ("IMPORTERS", "ImportReport", "import_paths"),
    "trajforge.envs": ("ENVIRONMENTS", "Environment", "make_env"),
    "trajforge.agents": ("POLICIES", "Policy"),
    "trajforge.rollout.factory": ("AgentSpec", "PolicyOptions", "build"),
    "trajforge.rollout.episode": ("Limits",),
    "trajforge.rollout.fork": ("ForkOptions", "fork"),
    "trajforge.rollout.runner": ("BatchSummary", "RolloutConfig", "run_batch"),
    "trajforge.rollout.backends.local": ("run_local",),
    "trajforge.evaluate": ("robustness_report",),
    "trajforge.diagnose": ("LOCALIZERS", "Diagnosis", "diagnose_run", "diagnose_store"),
    "trajforge.diagnose.run": ("make_localizer",),
    "trajforge.monitor": (
        "DETECTORS",
        "SessionMonitor",
        "StopHook",
        "load_detector",
        "save_detector",
    ),
    "trajforge.export": ("EXPORTERS",),
    "trajforge.strategies": ("distil_store", "retrieve_for"),
}
_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names}

__all__ = [
    "DETECTORS",
    "ENVIRONMENTS",
    "EXPORTERS",
    "FORMAT_VERSION",
    "IMPORTERS",
    "LOCALIZERS",
    "POLICIES",
    "AgentSpec",
    "BatchSummary",
    "Diagnosis",
    "Environment",
    "Fault",
    "ForkOptions",
    "ImportReport",
    "LLMCall",
    "Label",
    "Limits",
    "Message",
    "Outcome",
    "Policy",
    "PolicyOptions",
    "RolloutConfig",
    "SessionMonitor",
    "Source",
    "StopHook",
    "Store",
    "Strategy",
    "Task",
    "ToolCall",
    "Trajectory",
    "TrajectoryFilter",
    "Usage",
    "__version__",
    "build",
    "diagnose_run",
    "diagnose_store",
    "distil_store",
    "fork",
    "import_paths",
    "load_detector",
    "make_env",
    "make_localizer",
    "retrieve_for",
    "robustness_report",
    "run_batch",
    "run_local",
    "save_detector",
]


def __getattr__(name: str) -> Any:
    """Load a public name's module on first use (see module docstring)."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'trajforge' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
