"""tau-style customer-service environments (`tau-retail`, `tau-airline`) with an oracle.

Success is judged as tau-bench judges it: the final database must equal the one the task's
gold actions produce, and every required output must appear in an assistant message
(case-insensitive, commas ignored). The outputs check reads the conversation, which a tool
environment does not see by itself: the episode runner (fork, handoff, replay) binds the
live message list with `bind_conversation(messages)`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, ClassVar, Literal

import orjson
from pydantic import BaseModel, Field

from trajforge.envs.base import USER_STOP, EnvironmentBase, StepResult
from trajforge.envs.tau.db import DBState, TauDB
from trajforge.envs.tau.distractors import distractor_call
from trajforge.envs.tau.gold import Gold, GoldAction, load_gold
from trajforge.envs.tau.tasks import TauTaskSet
from trajforge.envs.tau.tooling import Tool, run_tool
from trajforge.errors import UserError
from trajforge.schema import Message, Outcome, Task, ToolCall

JUDGE = "tau-bench-reward"


class TauEnvConfig(BaseModel):
    """Options of a tau environment."""

    system_prompt: str | None = Field(
        default=None, description="Replaces the bundled policy text as the system message."
    )
    address_key: Literal["state", "province"] = Field(
        default="state",
        description="Name of the state field in user addresses. tau-bench's historical "
        "airline runs were recorded with an earlier users.json that called it 'province'; "
        "replay picks the name the recording shows.",
    )


@dataclass(frozen=True)
class TauState:
    """A snapshot: the database overlay, the calls made so far, and whether it ended."""

    db: DBState
    calls: tuple[tuple[str, str], ...]
    done: bool


@cache
def policy_text(domain: str) -> str:
    return (resources.files("trajforge.envs.tau") / "policies" / f"{domain}.md").read_text()


class TauEnv(EnvironmentBase):
    """One tau domain; subclasses set `domain`, `name` and `tool_list`."""

    domain = ""
    name = ""
    tool_list: ClassVar[list[Tool]] = []
    tables: ClassVar[str] = ""
    """Name of the table source (`db.TABLE_SOURCES`); empty: the domain's tau-bench tables."""

    def __init__(self, config: TauEnvConfig | None = None, **overrides: Any) -> None:
        self.config = (config or TauEnvConfig()).model_copy(update=overrides)
        self.db = TauDB(self.tables or self.domain, self.config.address_key)
        self.tool_map = {tool.name: tool for tool in self.tool_list}
        self.task: Task | None = None
        self.calls: list[tuple[str, str]] = []
        self.done = False
        self._conversation: list[Message] | None = None
        self._gold: Gold | None = None

    @property
    def tools(self) -> list[dict[str, Any]]:
        return [tool.schema() for tool in self.tool_list]

    def reset(self, task: Task) -> list[Message]:
        self.task = task
        self.db.reset()
        self.calls = []
        self.done = False
        self._conversation = None
        self._gold = None
        return [Message(role="system", content=self.config.system_prompt or self.policy())]

    def policy(self) -> str:
        """The domain policy the agent is given as its system message."""
        return policy_text(self.domain)

    def bind_conversation(self, messages: list[Message]) -> None:
        """Read required outputs from this (live) message list when evaluating."""
        self._conversation = messages

    def step(self, call: ToolCall) -> StepResult:
        result = run_tool(self.tool_map, self.db, call.name, call.arguments)
        self.calls.append((call.name, _canonical(call.arguments)))
        ends = bool(result.tool and result.tool.ends_episode)
        self.done = self.done or ends
        return StepResult(content=result.content, error=result.error, done=ends)

    def snapshot(self) -> TauState:
        return TauState(self.db.snapshot(), tuple(self.calls), self.done)

    def restore(self, state: TauState) -> None:
        self.db.restore(state.db)
        self.calls = list(state.calls)
        self.done = state.done

    def state_hash(self) -> str:
        """Hash of the database state (equal states, equal hashes)."""
        return self.db.state_hash()

    def changed_records(self) -> list[dict[str, Any]]:
        """The records that differ from the initial database, in table and key order."""
        return [
            {"table": table, "key": key, "record": record}
            for (table, key), record in sorted(self.db.changes().items())
        ]

    # -- judging -----------------------------------------------------------------------

    @property
    def gold(self) -> Gold:
        if self.task is None:
            raise UserError(f"{self.name}: reset(task) must come before judging")
        if self._gold is None:
            tables = self.tables or self.domain
            self._gold = _gold_for(tables, self.config.address_key, self.task, self.tool_map)
        return self._gold

    @classmethod
    def config_for_recording(cls, messages: list[Message]) -> TauEnvConfig:
        """The configuration matching the data revision a recorded run shows."""
        province = any(
            m.role == "tool" and m.name in (None, "get_user_details") and '"province": ' in m.text()
            for m in messages
        )
        return TauEnvConfig(address_key="province" if province else "state")

    def evaluate(self) -> Outcome:
        """tau-bench's reward: database equal to gold and outputs stated, once the episode
        has ended (user stop or hand-over); a conversation cut off earlier scores 0."""
        database_ok = self.db.changes() == self.gold.final
        outputs = self.outputs_given()
        ended = self._ended()
        success = ended and database_ok and all(outputs.values())
        return Outcome(
            success=success,
            reward=1.0 if success else 0.0,
            judged_by=JUDGE,
            details={"r_actions": float(database_ok), "outputs": outputs, "ended": ended},
        )

    def _ended(self) -> bool:
        if self.done or self._conversation is None:
            return True
        return any(m.role == "user" and USER_STOP in m.text() for m in self._conversation)

    def required_outputs(self) -> list[str]:
        """What the agent must state for the task to succeed (tau's required outputs)."""
        return list(self.gold.outputs)

    def outputs_given(self) -> dict[str, bool]:
        """For each required output: whether an assistant message states it."""
        said = [
            m.text().lower().replace(",", "")
            for m in self._conversation or []
            if m.role == "assistant" and m.text()
        ]
        return {out: any(out.lower() in text for text in said) for out in self.gold.outputs}

    # -- oracle ------------------------------------------------------------------------

    def distance(self) -> int | None:
        """Gold writes still missing (+1 while a required output is unsaid); None when the
        database has left every gold path (a wrong or extra write)."""
        done = self.gold.progress(self.db)
        if done is None:
            return None
        missing = len(self.gold.effective) - len(done)
        return missing + (0 if all(self.outputs_given().values()) else 1)

    def expert_action(self) -> ToolCall | Message | None:
        """The next gold action; then a final message that states the required outputs."""
        done = self.gold.progress(self.db)
        if done is None:
            return Message(role="assistant", content=CANNOT_COMPLETE)
        action = self._next_gold_action(done)
        if action is not None:
            return ToolCall(id=f"gold_{action.index}", name=action.name, arguments=action.arguments)
        return Message(role="assistant", content=final_message(self.gold.outputs))

    def _next_gold_action(self, done: tuple[int, ...]) -> GoldAction | None:
        last_done = max(done, default=-1)
        made = set(self.calls)
        for action in self.gold.actions:
            if action.index in self.gold.effective:
                if action.index not in done:
                    return action
            elif (
                action.index > last_done and (action.name, _canonical(action.arguments)) not in made
            ):
                if action.writes and action.index not in self.gold.effective:
                    continue  # a gold write that changes nothing: skip it
                return action
        return None

    def tasks(self, count: int | None = None, seed: int = 0) -> list[Task]:
        """The bundled tasks of this environment (it is its own `TaskSet`)."""
        return TauTaskSet(self.name).tasks(count, seed)

    def user_facts(self) -> dict[str, str]:
        """What the task's user can say about themselves (for the scripted user)."""
        user_id = str((self.task.data if self.task else {}).get("user_id") or "")
        user = self.db.get("users", user_id)
        if user is None:
            return {"user id": user_id} if user_id else {}
        facts = {"user id": user_id}
        if self.domain == "retail":
            name = user["name"]
            facts |= {
                "email": user["email"],
                "name": f"{name['first_name']} {name['last_name']}",
                "zip code": user["address"]["zip"],
            }
        return facts

    def distractor_action(self, rng: random.Random) -> ToolCall | None:
        """A plausible wrong call for this task: a read of the wrong record or a wrong write."""
        if self.task is None:
            return None
        return distractor_call(self.domain, self.db, self.task, rng)


CANNOT_COMPLETE = "I am sorry, but I cannot complete this request."


def final_message(outputs: list[str]) -> str:
    text = "Your request has been taken care of."
    if outputs:
        text += " The information you asked for: " + "; ".join(outputs) + "."
    return text + " Is there anything else I can help you with?"


def _canonical(arguments: str) -> str:
    try:
        return orjson.dumps(orjson.loads(arguments or "{}"), option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONDecodeError:
        return arguments


_GOLD_CACHE: dict[tuple[str, str, str], Gold] = {}


def _gold_for(domain: str, address_key: str, task: Task, tools: dict[str, Tool]) -> Gold:
    key = (domain, address_key, orjson.dumps(task.gold, option=orjson.OPT_SORT_KEYS).decode())
    if key not in _GOLD_CACHE:
        _GOLD_CACHE[key] = load_gold(task, domain, address_key, tools)
    return _GOLD_CACHE[key]
