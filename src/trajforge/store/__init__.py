"""Trajectory storage: the SQLite store, filters, and exports."""

from trajforge.store.filters import TrajectoryFilter
from trajforge.store.sqlite import (
    DB_ENV_VAR,
    EncodedTrajectory,
    QueryTooSlow,
    Store,
    StoreFull,
    TrajectoryRow,
    default_db_path,
    encode,
)
from trajforge.store.threads import ThreadStores

__all__ = [
    "DB_ENV_VAR",
    "EncodedTrajectory",
    "QueryTooSlow",
    "Store",
    "StoreFull",
    "ThreadStores",
    "TrajectoryFilter",
    "TrajectoryRow",
    "default_db_path",
    "encode",
]
