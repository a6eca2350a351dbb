"""Choosing the tasks of a batch: `N` (the first N), `A-B` (a range) or a JSON/JSONL file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trajforge.envs.base import Environment, TaskLookup, TaskSet
from trajforge.errors import InputError, UserError
from trajforge.jsonfile import load_json_records
from trajforge.registry import Registry
from trajforge.schema import Task

TASK_SETS: Registry[type] = Registry("task set")
"""Task sets of environments that do not list their own tasks, by environment name."""
TASK_SETS.register("tau-retail", "trajforge.envs.tau:TauTaskSet")
TASK_SETS.register("tau-airline", "trajforge.envs.tau:TauTaskSet")

TASKS_HELP = (
    "--tasks accepts N (the first N tasks of the environment), A-B (tasks A to B, counted "
    "from 0), or a .json/.jsonl file listing task ids or Task objects"
)


def select_tasks(env: Any, spec: str | int | Path) -> list[Task]:
    """The tasks named by `spec` for environment `env`; UserError when there are none.

    `env` is an environment object or its registered name (`"household"`, `"tau-retail"`...);
    `spec` is a count (`3` or `"3"`), a range `"A-B"`, or a JSON/JSONL file of tasks.
    """
    if isinstance(env, str):
        from trajforge.envs import make_env

        env = make_env(env)
    if not isinstance(env, Environment):
        raise UserError(
            f"select_tasks expects an environment or its name, got {type(env).__name__}"
        )
    if isinstance(spec, bool) or not isinstance(spec, str | int | Path):
        raise UserError(f"select_tasks expects a count, 'A-B' or a file, got {spec!r}")
    spec = str(spec).strip()
    if re.fullmatch(r"\d+", spec):
        tasks = _generated(env, int(spec))
    elif match := re.fullmatch(r"(\d+)-(\d+)", spec):
        first, last = int(match.group(1)), int(match.group(2))
        if last < first:
            raise UserError(f"task range '{spec}' ends before it starts; {TASKS_HELP}")
        tasks = _generated(env, last + 1)[first : last + 1]
    elif Path(spec).exists():
        tasks = _from_file(env, Path(spec))
    else:
        raise UserError(f"--tasks '{spec}' is neither a count, a range nor a file; {TASKS_HELP}")
    if not tasks:
        raise UserError(f"environment '{env.name}' has no tasks for '{spec}'; {TASKS_HELP}")
    return [t.model_copy(update={"environment": t.environment or env.name}) for t in tasks]


def task_set(env: Any) -> Any:
    """What lists the tasks of `env`: the environment itself or its registered task set."""
    if isinstance(env, TaskSet):
        return env
    if env.name in TASK_SETS.names():
        return TASK_SETS.get(env.name)(env.name)
    raise UserError(f"environment '{env.name}' cannot list its tasks; {TASKS_HELP}")


def _generated(env: Any, count: int) -> list[Task]:
    return list(task_set(env).tasks(count))[:count]


def _from_file(env: Any, path: Path) -> list[Task]:
    items = load_json_records(path)
    if not isinstance(items, list):
        raise InputError(str(path), f"expected a list of task ids or tasks; {TASKS_HELP}")
    return [_task(env, item, path, index) for index, item in enumerate(items)]


def _task(env: Any, item: Any, path: Path, index: int) -> Task:
    if isinstance(item, dict):
        try:
            return Task.model_validate(item)
        except ValidationError as exc:
            raise InputError(str(path), f"not a Task: {exc.errors()[0]['msg']}", index) from None
    if not isinstance(item, str):
        raise InputError(str(path), "expected a task id (string) or a Task object", index)
    return task_by_id(env, item, str(path), index)


def task_by_id(env: Any, task_id: str, file: str = "--tasks", index: int | None = None) -> Task:
    """Look a task up by id: the environment's `task_by_id`, else its task list."""
    if isinstance(env, TaskLookup):
        return env.task_by_id(task_id)
    known = {t.id: t for t in task_set(env).tasks(None)}
    if task_id not in known:
        raise InputError(file, f"environment '{env.name}' has no task '{task_id}'", index)
    return known[task_id]
