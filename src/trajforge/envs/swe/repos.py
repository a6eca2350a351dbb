"""Generated repositories: a small package with one seeded bug, visible and hidden tests.

The visible tests (in the workspace) are the cases the buggy code still passes; the hidden
tests (kept by the environment, run only to judge) are all cases. The issue text reports
one failing call with what it returned.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from trajforge.envs.swe.templates import TEMPLATES, Bug, Template

PACKAGES = ("toolbox", "utilkit", "helpers", "pykit", "common", "basics")


@dataclass(frozen=True)
class Repo:
    """One generated task: fixed and buggy files, hidden tests, the bug and its report."""

    fixed: dict[str, str]
    buggy: dict[str, str]
    hidden_tests: str
    bug_path: str
    bug: Bug
    function: str
    issue: str


def _module_sources(package: str, chosen: list[Template]) -> dict[str, str]:
    modules: dict[str, list[str]] = {}
    for template in chosen:
        modules.setdefault(f"{package}/{template.topic}.py", []).append(template.source)
    files = {path: "\n\n".join(parts) for path, parts in modules.items()}
    files[f"{package}/__init__.py"] = f'"""The {package} package."""\n'
    return files


def _run_case(sources: dict[str, str], call: str) -> object:
    namespace: dict = {}
    for path, source in sources.items():
        if not path.endswith("__init__.py"):
            exec(compile(source, path, "exec"), namespace)  # our own generated code
    try:
        return eval(call, namespace)  # our own generated code
    except Exception as exc:
        return exc


def _tests(package: str, chosen: list[Template], cases: list[tuple[Template, str, str]]) -> str:
    imports = sorted({(t.topic, t.name) for t in chosen})
    lines = ["import unittest", ""]
    lines += [f"from {package}.{topic} import {name}" for topic, name in imports]
    lines += ["", "", "class Tests(unittest.TestCase):"]
    for number, (template, call, expected) in enumerate(cases):
        lines += [
            f"    def test_{template.name}_{number}(self):",
            f"        self.assertEqual({call}, {expected})",
            "",
        ]
    if not cases:
        lines += ["    pass", ""]
    return "\n".join(lines)


@lru_cache(maxsize=1024)
def generate_repo(seed: int) -> Repo:
    """The repository of `seed` (cached; treat as read-only)."""
    rng = random.Random(seed)
    package = rng.choice(PACKAGES)
    chosen = sorted(rng.sample(TEMPLATES, rng.randint(3, 5)), key=lambda t: t.name)
    target = rng.choice(chosen)
    bug = rng.choice(target.bugs)
    fixed = _module_sources(package, chosen)
    bug_path = f"{package}/{target.topic}.py"
    buggy = dict(fixed)
    buggy[bug_path] = fixed[bug_path].replace(bug.old, bug.new, 1)
    cases = [(t, call, expected) for t in chosen for call, expected in t.cases]
    results = [(case, _run_case(buggy, case[1])) for case in cases]
    passing = [case for case, got in results if got == eval(case[2])]
    failing = [(case, got) for case, got in results if got != eval(case[2])]
    (_, call, expected), got = failing[0]
    shown = f"raises {type(got).__name__}" if isinstance(got, Exception) else f"returns {got!r}"
    issue = f"Bug report for `{package}`: `{call}` {shown}, but it should return {expected}."
    buggy["tests/__init__.py"] = ""
    buggy["tests/test_visible.py"] = _tests(package, chosen, passing)
    fixed = {
        **fixed,
        "tests/__init__.py": "",
        "tests/test_visible.py": buggy["tests/test_visible.py"],
    }
    return Repo(fixed, buggy, _tests(package, chosen, cases), bug_path, bug, target.name, issue)
