"""Trajectory storage: the SQLite store, filters, and exports."""

from trajforge.store.filters import TrajectoryFilter
from trajforge.store.sqlite import (
    DB_ENV_VAR,
    EncodedTrajectory,
    Store,
    TrajectoryRow,
    default_db_path,
    encode,
)

__all__ = [
    "DB_ENV_VAR",
    "EncodedTrajectory",
    "Store",
    "TrajectoryFilter",
    "TrajectoryRow",
    "default_db_path",
    "encode",
]
