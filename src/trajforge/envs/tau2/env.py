"""tau2-bench's retail and airline domains as forkable environments (`tau2-retail`,
`tau2-airline`).

A tau2 task (`tasks.json`, or a recorded simulation's task as the tau2 importer stores it:
`Task.gold` = its `evaluation_criteria`, `Task.data` = the user scenario) is judged as tau2
judges it, component by component of its `reward_basis`:

- `DB`: the final database equals the one the task's gold actions produce;
- `COMMUNICATE`: every `communicate_info` string appears in an assistant message
  (case-insensitive, commas removed);
- `ACTION`: every gold action appears among the calls made (same tool, same arguments,
  or only the `compare_args` when the action names them);
- `NL_ASSERTION`: needs a model to judge; it is not evaluated here and is listed under
  `details["unjudged"]` (a recorded verdict stays in the recorded outcome).

The reward is the product of the judged components, 0 when the conversation has not
ended. Tools, database snapshots, the oracle (gold progress, expert actions) and the
scripted user's facts are tau-bench's machinery (`envs/tau/`), run over tau2's tables and
tools.
"""

from __future__ import annotations

import random
from typing import Any

import orjson

from trajforge.envs.base import USER_STOP
from trajforge.envs.tau.db import TauDB
from trajforge.envs.tau.env import TauEnv
from trajforge.envs.tau.tooling import run_tool
from trajforge.envs.tau2.airline import TAU2_AIRLINE_TOOLS
from trajforge.envs.tau2.retail import TAU2_RETAIL_TOOLS
from trajforge.envs.tau2.tables import domain_tasks, policy_text
from trajforge.importers.tau2_bench import scenario_text
from trajforge.schema import Message, Outcome, Task

JUDGE = "tau2-bench-reward"
DEFAULT_BASIS = ("DB", "COMMUNICATE")
JUDGED = ("DB", "COMMUNICATE", "ACTION")
STOP_TOKENS = (USER_STOP, "###TRANSFER###", "###OUT-OF-SCOPE###")
"""The tau2 user simulator ends a conversation with one of these (all count as a user stop)."""


class Tau2Env(TauEnv):
    """One tau2 domain; subclasses set `domain`, `name`, `tables` and `tool_list`."""

    def reset(self, task: Task) -> list[Message]:
        self.tau2_task = task
        return super().reset(tau_shaped(task, self.tables))

    def policy(self) -> str:
        return policy_text(self.domain)

    def tasks(self, count: int | None = None, seed: int = 0) -> list[Task]:
        """The domain's tau2 tasks (`count` of them; seed 0 keeps file order)."""
        tasks = [task_from_tau2(record, self.name) for record in domain_tasks(self.domain)]
        if seed:
            random.Random(seed).shuffle(tasks)
        return tasks if count is None else tasks[:count]

    def evaluate(self) -> Outcome:
        criteria = self.tau2_task.gold if isinstance(self.tau2_task.gold, dict) else {}
        basis = list(criteria.get("reward_basis") or DEFAULT_BASIS)
        components = {
            "DB": float(self.db.changes() == self.gold.final),
            "COMMUNICATE": float(all(self.outputs_given().values())),
            "ACTION": float(all(self.actions_done(criteria).values())),
        }
        judged = {b: components[b] for b in basis if b in JUDGED}
        ended = self._ended()
        reward = 1.0 if ended else 0.0
        for value in judged.values():
            reward *= value
        return Outcome(
            success=reward == 1.0,
            reward=reward,
            judged_by=JUDGE,
            details={
                "reward_basis": basis,
                "reward_breakdown": judged,
                "unjudged": [b for b in basis if b not in JUDGED],
                "communicate": self.outputs_given(),
                "ended": ended,
            },
        )

    def _ended(self) -> bool:
        if self.done or self._conversation is None:
            return True
        return any(
            m.role == "user" and any(token in m.text() for token in STOP_TOKENS)
            for m in self._conversation
        )

    def actions_done(self, criteria: dict[str, Any]) -> dict[str, bool]:
        """For each gold action (by `action_id`): whether a call made matches it."""
        made = [(name, orjson.loads(arguments)) for name, arguments in self.calls]
        return {
            str(action.get("action_id", index)): any(
                name == action["name"] and _matches(args, action)
                for name, args in made
                if isinstance(args, dict)
            )
            for index, action in enumerate(criteria.get("actions") or [])
        }


def _matches(arguments: dict[str, Any], action: dict[str, Any]) -> bool:
    gold = action.get("arguments") or {}
    keys = action.get("compare_args")
    keys = list(gold) if keys is None else keys
    return all(arguments.get(key) == gold.get(key) for key in keys)


def tau_shaped(task: Task, tables: str) -> Task:
    """The task in the shape tau-bench's machinery reads: `gold = {actions: [{name,
    kwargs}], outputs}` and `data = {user_id}` (the user the gold actions serve)."""
    criteria = task.gold if isinstance(task.gold, dict) else {}
    actions = [
        {"name": a["name"], "kwargs": a.get("arguments") or {}}
        for a in criteria.get("actions") or []
    ]
    outputs = [str(info) for info in criteria.get("communicate_info") or []]
    return task.model_copy(
        update={
            "gold": {"actions": actions, "outputs": outputs},
            "data": {"user_id": gold_user(actions, tables)},
        }
    )


def gold_user(actions: list[dict[str, Any]], tables: str) -> str | None:
    """The user id the gold actions name, or the one a gold user lookup finds."""
    for action in actions:
        user_id = action["kwargs"].get("user_id")
        if user_id:
            return str(user_id)
    tools = {t.name: t for t in TAU2_RETAIL_TOOLS}
    for action in actions:
        if action["name"].startswith("find_user_id"):
            db = TauDB(tables)
            found = run_tool(tools, db, action["name"], orjson.dumps(action["kwargs"]).decode())
            if not found.error:
                return found.content
    return None


def task_from_tau2(record: dict[str, Any], environment: str) -> Task:
    """A task of tau2's `tasks.json`, as the tau2 importer stores a simulation's task."""
    scenario = record.get("user_scenario") or {}
    return Task(
        id=str(record["id"]),
        environment=environment,
        instruction=scenario_text(scenario),
        gold=record.get("evaluation_criteria"),
        data={k: v for k, v in record.items() if k not in {"id", "evaluation_criteria"}},
    )


class Tau2RetailEnv(Tau2Env):
    """tau2's online shop: 500 users, 1000 orders, 50 products; 114 tasks."""

    domain = "retail"
    name = "tau2-retail"
    tables = "tau2-retail"
    tool_list = TAU2_RETAIL_TOOLS


class Tau2AirlineEnv(Tau2Env):
    """tau2's airline: 500 users, 2000 reservations, 300 flights; 50 tasks."""

    domain = "airline"
    name = "tau2-airline"
    tables = "tau2-airline"
    tool_list = TAU2_AIRLINE_TOOLS
