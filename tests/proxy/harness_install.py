"""Install the real harness the proxy tests run (mini-swe-agent from PyPI) in its own venv.

The venv lives in the test cache (`$TRAJFORGE_TEST_CACHE`, default
`~/.cache/trajforge-tests`) and is reused once complete. A first install pulls litellm and
its dependencies (about 750 MB; 12 minutes on a loaded 2-core machine), far more than a
test's time limit, so `make test` runs this script before the suite:

    python tests/proxy/harness_install.py

The tests call the same function; on a machine where it already ran they find the venv.
`python tests/proxy/harness_install.py DIR` makes the venv in DIR instead (`make
mini-swe-agent`: the harness for `trajforge swe agent`). Only the standard library is used,
so the script runs with any Python 3.11+.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

MINI_REQUIREMENT = "mini-swe-agent==2.4.6"
INSTALL_TIMEOUT_S = 1800


def cache_dir() -> Path:
    root = os.environ.get("TRAJFORGE_TEST_CACHE") or Path.home() / ".cache" / "trajforge-tests"
    return Path(root)


def default_venv() -> Path:
    return cache_dir() / "mini-swe-agent-2.4"


def installed_mini(venv: Path | None = None) -> Path | None:
    """`mini` of a complete install, or None."""
    venv = venv or default_venv()
    mini = venv / "bin" / "mini"
    return mini if (venv / ".installed").exists() and mini.exists() else None


def install_mini(venv: Path | None = None) -> Path:
    """`mini` from a venv with mini-swe-agent 2.4.6, installed when missing; RuntimeError
    with pip's output when the install fails."""
    venv = venv or default_venv()
    if (mini := installed_mini(venv)) is not None:
        return mini
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", MINI_REQUIREMENT],
    ]
    for step in steps:
        result = subprocess.run(step, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
        if result.returncode != 0:
            raise RuntimeError(f"could not install {MINI_REQUIREMENT}: {result.stderr[-2000:]}")
    (venv / ".installed").write_text(MINI_REQUIREMENT + "\n")
    return venv / "bin" / "mini"


if __name__ == "__main__":
    try:
        target = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else None
        print(f"mini-swe-agent harness: {install_mini(target)}")
    except RuntimeError as exc:
        sys.exit(f"error: {exc}")
