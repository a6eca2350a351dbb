"""Saving and loading trained detectors.

A model file is a magic line, one line of JSON header, then the pickled detector:

    TRAJFORGE-MONITOR
    {"feature_version": "prefix-v1", "detector": "learned", "feature_names": [...], ...}
    <pickle>

The header is checked before anything is unpickled: a file from another feature version, or
a file that is not a model file, gives a `UserError` that says what to do. Pickles run code
when loaded: only load model files you made or trust.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import orjson

from trajforge.errors import UserError
from trajforge.monitor.detectors import Detector
from trajforge.monitor.features import FEATURE_VERSION, feature_names
from trajforge.outputs import atomic_output

MAGIC = b"TRAJFORGE-MONITOR\n"


def save_detector(detector: Detector, path: str | Path, info: dict[str, Any] | None = None) -> None:
    """Write `detector` to `path` atomically (a temporary file renamed into place)."""
    path = Path(path)
    header = {
        "feature_version": FEATURE_VERSION,
        "feature_names": list(feature_names()),
        "detector": detector.name,
        "thresholds": detector.thresholds,
        "min_step": detector.config.min_step,
        "default_loss": detector.config.default_loss,
    } | (info or {})
    payload = MAGIC + orjson.dumps(header) + b"\n" + pickle.dumps(detector, protocol=5)
    with atomic_output(path) as tmp:
        tmp.write_bytes(payload)


def read_header(path: str | Path) -> dict[str, Any]:
    """The JSON header of a model file; a `UserError` when the file is not one."""
    data = _read(Path(path))
    return _header(Path(path), data)[0]


def load_detector(path: str | Path) -> Detector:
    """Load a detector saved by `save_detector`, checking its feature version first."""
    path = Path(path)
    header, payload = _header(path, _read(path))
    version = header.get("feature_version")
    if version != FEATURE_VERSION or header.get("feature_names") != list(feature_names()):
        raise UserError(
            f"{path}: model was trained on feature set '{version}', this trajforge computes "
            f"'{FEATURE_VERSION}'; retrain it with `trajforge monitor train --out {path}`"
        )
    try:
        detector = pickle.loads(payload)
    except Exception as exc:  # any unpickling failure means a damaged file
        raise UserError(
            f"{path}: model file is corrupt ({type(exc).__name__}); retrain it"
        ) from exc
    if not hasattr(detector, "risk") or not hasattr(detector, "thresholds"):
        raise UserError(f"{path}: model file does not hold a monitor detector")
    return detector


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise UserError(
            f"no model file at {path}; train one with `trajforge monitor train`"
        ) from None
    except OSError as exc:
        raise UserError(f"cannot read model file {path}: {exc.strerror}") from None


def _header(path: Path, data: bytes) -> tuple[dict[str, Any], bytes]:
    if not data.startswith(MAGIC):
        raise UserError(f"{path}: not a trajforge monitor model file (no TRAJFORGE-MONITOR header)")
    line, _, payload = data[len(MAGIC) :].partition(b"\n")
    try:
        header = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise UserError(f"{path}: model file is corrupt (unreadable header)") from None
    if not isinstance(header, dict):
        raise UserError(f"{path}: model file is corrupt (header is not an object)")
    return header, payload
