"""The bundled tau tasks: the distinct `info.task` entries of the recorded runs."""

from __future__ import annotations

import gzip
import random
from functools import cache
from importlib import resources

import orjson

from trajforge.schema import Task


@cache
def bundled_tasks(environment: str) -> tuple[Task, ...]:
    """All bundled tasks of `tau-retail` or `tau-airline`, in task-id order."""
    raw = (resources.files("trajforge.envs.tau") / "data" / "tasks.json.gz").read_bytes()
    records = orjson.loads(gzip.decompress(raw))
    return tuple(Task(**r) for r in records if r["environment"] == environment)


class TauTaskSet:
    """Lists the bundled tasks of one tau environment (a `TaskSet`)."""

    def __init__(self, environment: str) -> None:
        self.environment = environment

    def tasks(self, count: int | None = None, seed: int = 0) -> list[Task]:
        """`count` tasks (all when None); seed 0 keeps task-id order, others shuffle."""
        tasks = list(bundled_tasks(self.environment))
        if seed:
            random.Random(seed).shuffle(tasks)
        return tasks if count is None else tasks[:count]
