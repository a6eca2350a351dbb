"""Per-test results from a test log, in each repository's format, and the SWE-bench grade.

- `pytest` (`-rA` short summary, also inside sphinx's tox output): `PASSED name`,
  `FAILED name - message`, `ERROR`, `SKIPPED`, `XFAIL`, `XPASS` at the start of a line
  (terminal colours removed: tox colours pytest's output).
  SWE-bench's parser names a test by the first word after the status, so a parametrized
  id with spaces is known by its first word there; both the whole id and that word are
  kept here, and a listed test is looked up by either. A parameter that is a path is
  listed by its last part (`[/etc/invalid/location]` as `[/location]`: the paths differ
  between machines), so that form is kept too.
- `sympy` (`bin/test --verbose`): `test_name ok`, `test_name F`, `test_name E`, and the
  `___ path.py:test_name ___` headers of failures.

Grade (as the harness's): a test passes when its status is PASSED or XFAIL, fails when it
is FAILED or ERROR or absent from the log; other statuses (SKIPPED) count as neither. The
instance is resolved when every FAIL_TO_PASS and PASS_TO_PASS test that passes or fails
passes.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pydantic import BaseModel, Field

PYTEST_STATUSES = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")
PASSING = frozenset({"PASSED", "XFAIL"})
FAILING = frozenset({"FAILED", "ERROR"})
_COLOR = re.compile(r"\x1b\[[0-9;]*m")
_PATH_PARAMETER = re.compile(r"\[/.*/([^/\]]*)\]$")
_SYMPY_HEADER = re.compile(r"_+ (\S+\.py):(\S+) _+")
_SYMPY_RESULT = re.compile(r"^(test_\S+)\s+(ok|F|E|f|s|X|w)\s*$")
_SYMPY_STATUS = {"ok": "PASSED", "F": "FAILED", "E": "ERROR", "f": "XFAIL", "s": "SKIPPED"}


def parse_pytest(log: str) -> dict[str, str]:
    statuses: dict[str, str] = {}
    for raw in _COLOR.sub("", log).splitlines():
        line = raw.strip()
        status = next((s for s in PYTEST_STATUSES if line.startswith(s + " ")), None)
        if status is None:
            continue
        name = line[len(status) + 1 :].strip()
        if status in FAILING and " - " in name:
            name = name.split(" - ", 1)[0].strip()
        if not name:
            continue
        statuses[name] = status
        statuses.setdefault(name.split()[0], status)
        statuses.setdefault(_PATH_PARAMETER.sub(r"[/\1]", name), status)
    return statuses


def parse_sympy(log: str) -> dict[str, str]:
    statuses = {f"{path}:{name}": "FAILED" for path, name in _SYMPY_HEADER.findall(log)}
    for raw in log.splitlines():
        match = _SYMPY_RESULT.match(raw.strip())
        if match and match.group(2) in _SYMPY_STATUS:
            statuses[match.group(1)] = _SYMPY_STATUS[match.group(2)]
    return statuses


PARSERS: dict[str, Callable[[str], dict[str, str]]] = {"sympy/sympy": parse_sympy}
"""Repositories whose log is not pytest's."""


def parse_log(repo: str, log: str) -> dict[str, str]:
    return PARSERS.get(repo, parse_pytest)(log)


class TestGroup(BaseModel):
    """Tests of one list (FAIL_TO_PASS or PASS_TO_PASS) by how they ended."""

    success: list[str] = Field(default_factory=list)
    failure: list[str] = Field(default_factory=list)


class Grade(BaseModel):
    resolved: bool
    FAIL_TO_PASS: TestGroup
    PASS_TO_PASS: TestGroup


def _group(tests: list[str], statuses: dict[str, str]) -> TestGroup:
    group = TestGroup()
    for test in tests:
        status = statuses.get(test)
        if status in PASSING:
            group.success.append(test)
        elif status is None or status in FAILING:
            group.failure.append(test)
    return group


def grade(fail_to_pass: list[str], pass_to_pass: list[str], statuses: dict[str, str]) -> Grade:
    f2p, p2p = _group(fail_to_pass, statuses), _group(pass_to_pass, statuses)
    return Grade(
        resolved=not f2p.failure and not p2p.failure,
        FAIL_TO_PASS=f2p,
        PASS_TO_PASS=p2p,
    )
