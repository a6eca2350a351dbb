"""Where the benchmarks read the real runs: the DATA_DIR argument, $TRAJFORGE_SHARED_DATA, or
../shared/data beside the repository (benchmarks run as `python bench/NAME.py`, which puts this
folder on the import path)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def data_dir(argument: str | None) -> Path:
    """The shared data folder; exits with a message naming the fix when there is none."""
    path = Path(
        argument or os.environ.get("TRAJFORGE_SHARED_DATA") or REPO.parent / "shared" / "data"
    )
    if not path.is_dir():
        raise SystemExit(f"no data folder at {path}; pass DATA_DIR or set TRAJFORGE_SHARED_DATA")
    return path
