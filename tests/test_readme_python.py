"""The README's Python example runs as written, and `import trajforge` stays light."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import trajforge

README = Path(__file__).resolve().parents[1] / "README.md"
HEAVY = ("numpy", "sklearn", "torch", "uvicorn", "fastapi", "pyarrow", "httpx", "openai")


def _python_example() -> str:
    section = README.read_text().split("\n## Python\n", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the Python section has one example"
    return blocks[0]


def test_the_readme_python_example_runs_as_written(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _python_example()],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "8 runs imported"
    assert any(line.startswith("fork solved: ") for line in lines)
    assert re.fullmatch(r"\d+ runs exported", lines[-1])
    exported = int(lines[-1].split()[0])
    assert exported == 8 + 1 + 6  # imported runs, the fork, the rollout's episodes


def test_import_trajforge_loads_only_the_schema_and_version() -> None:
    code = (
        "import json, sys, trajforge\n"
        "print(json.dumps([sorted(m for m in sys.modules if m.startswith('trajforge')),"
        f" [m for m in {HEAVY!r} if m in sys.modules]]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    loaded, heavy = json.loads(out.stdout.splitlines()[-1])
    assert loaded == ["trajforge", "trajforge.schema", "trajforge.version"]
    assert heavy == []


def test_every_public_name_resolves() -> None:
    for name in trajforge.__all__:
        assert getattr(trajforge, name) is not None, name
    assert set(trajforge.__all__) <= set(dir(trajforge))
