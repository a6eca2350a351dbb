"""Format detection on every file of ../shared/data: each file is read as the format its
folder holds, and no other format claims it.

`EXPECTED` maps path patterns (relative to the data folder, first match wins) to the format,
`None` for files that are not runs, or `"companion"` for files consumed with a run. A file
no pattern covers fails the test, so a new kind of file gets a line here.
"""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

import pytest

from trajforge.importers.base import HEAD_BYTES, read_head, read_skeleton
from trajforge.importers.pipeline import files_under, plan
from trajforge.importers.registry import all_importers

COMPANION = "companion"
EXPECTED: list[tuple[str, str | None]] = [
    ("formats/atif/*.trajectory.json", "atif"),
    ("formats/inspect/*.eval", "inspect"),
    ("formats/inspect/*.json", "inspect"),
    ("formats/openhands/*.jsonl", "openhands"),
    ("formats/openhands/*.json", "openhands"),
    ("formats/swe-agent/*.traj", "swe-agent"),
    ("swe-bench-verified/*/trajs/*/*.traj.json", "mini-swe-agent"),
    ("swe-bench-verified/*/logs/*/report.json", COMPANION),
    ("swe-bench-verified/*/results_summary.json", COMPANION),
    ("tau-bench/historical_trajectories/*.json", "tau-bench"),
    ("agentrx/tau-retail/tau_dataset_full.json", "tau-bench"),
    ("tau2-bench/toolorchestra_gpt-5/submission.json", COMPANION),
    ("tau2-bench/toolorchestra_gpt-5/*.json", "tau2-bench"),
    ("who-and-when/*/*.json", "who-and-when"),
    ("*.md", None),
    ("agentrx/tau-retail/tools_structure.json", None),
    ("swe-bench-verified/instances.jsonl", None),
    ("swe-bench-verified/repos/*.bundle", None),
    ("tau-bench/envs/*", None),
    ("tau2-bench/domains/*", None),
    ("tau2-bench/LICENSE", None),
]


def expected_format(relative: str) -> str | None:
    for pattern, fmt in EXPECTED:
        if fnmatch(relative, pattern):
            return fmt
    pytest.fail(f"{relative}: no line of EXPECTED covers it; add one")


def claims(path: Path) -> list[str]:
    """Every format whose detection accepts the file (from its head, else its skeleton)."""
    head = read_head(path)
    found = [imp.name for imp in all_importers() if imp.detect(path, head)]
    if found or len(head) < HEAD_BYTES or head.lstrip()[:1] not in (b"{", b"["):
        return found
    skeleton = read_skeleton(path)
    return [] if skeleton is None else [i.name for i in all_importers() if i.detect(path, skeleton)]


def test_every_file_is_its_folders_format_and_no_other(shared_data: Path) -> None:
    files = files_under(shared_data)
    jobs, report = plan([str(shared_data)])
    planned = {str(path): imp.name for path, imp in jobs}
    companions = set(report.sidecars)
    wrong = []
    for path in files:
        relative = path.relative_to(shared_data).as_posix()
        want = expected_format(relative)
        got = COMPANION if str(path) in companions else planned.get(str(path))
        claimed = claims(path)
        allowed = [want] if want not in (None, COMPANION) else []
        if got != want or claimed != allowed:
            wrong.append(f"{relative}: expected {want}, read as {got}, claimed by {claimed}")
    assert not wrong, "\n".join(wrong[:20])
    assert len(files) == len(planned) + len(companions) + len(report.not_trajectories)
    assert {"atif", "inspect", "openhands", "swe-agent"} <= set(planned.values())
