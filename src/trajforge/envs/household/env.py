"""The household environment: text households in the spirit of ALFWorld.

Tasks are generated from a seed and a difficulty (1: one room, plain placement; 2: three
rooms, the object must be cleaned, heated or cooled first; 3: five rooms, two objects, most
things hidden in closed receptacles). A task id `household-d{difficulty}-{world seed}`
rebuilds its world, so tasks travel as ids.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel, Field

from trajforge.envs.base import EnvironmentBase, StepResult
from trajforge.envs.household import oracle
from trajforge.envs.household.tools import TOOL_NAMES, TOOLS
from trajforge.envs.household.world import FLAG, Goal, Layout, State, generate_world, goal_met
from trajforge.errors import ToolError, UserError
from trajforge.schema import Message, Outcome, Task, ToolCall

NAME = "household"
SYSTEM_PROMPT = (
    "You are a household robot. Use the tools to move between rooms and receptacles, open "
    "and close them, take and put objects, and clean, heat or cool what you hold. You can "
    "hold one object at a time. Reply without a tool call when the task is done."
)
_READ_ONLY = frozenset({"examine", "look", "inventory"})
_TASK_ID = re.compile(r"^household-d(?P<difficulty>[123])-(?P<seed>\d+)$")
_TREATED = {
    "clean": ("clean", "sinkbasin"),
    "heat": ("hot", "microwave"),
    "cool": ("cool", "fridge"),
}


def _article(name: str) -> str:
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


class HouseholdConfig(BaseModel):
    """Which tasks the household task generator makes."""

    difficulty: int | None = Field(
        default=None, ge=1, le=3, description="Only this difficulty (default: cycle 1, 2, 3)."
    )


def task_for(world_seed: int, difficulty: int) -> Task:
    """The task of one generated world (with the oracle's plan as gold)."""
    world = generate_world(world_seed, difficulty)
    plan = oracle.plan(world.layout, world.initial, world.goal)
    return Task(
        id=f"household-d{difficulty}-{world_seed}",
        environment=NAME,
        instruction=world.goal.text(),
        gold=[{"name": name, "arguments": args} for name, args in plan or []],
        data={"difficulty": difficulty, "world_seed": world_seed},
    )


@dataclass(slots=True)
class Episode:
    """One household episode: its world's layout and goal, the current state, and the oracle's
    plan, kept while the agent follows it (`planned` is False when it must be recomputed)."""

    layout: Layout
    goal: Goal
    state: State
    plan: list[oracle.Action] | None = None
    planned: bool = False

    def copy(self) -> Episode:
        """A copy whose state can change without touching this one (layout and goal are fixed)."""
        return Episode(self.layout, self.goal, self.state.copy(), self.plan, self.planned)


class HouseholdEnv(EnvironmentBase):
    """See module docstring. Implements Environment, Oracle, TaskSet and a distractor."""

    name = NAME

    def __init__(self, config: HouseholdConfig | None = None, **overrides: Any) -> None:
        self.config = (config or HouseholdConfig()).model_copy(update=overrides)
        self._episode: Episode | None = None
        self._handlers = {name: getattr(self, f"_do_{name}") for name in TOOL_NAMES}

    @property
    def world(self) -> Episode:
        """The current episode; only after `reset`."""
        if self._episode is None:
            raise RuntimeError("the household environment has no episode yet: call reset(task)")
        return self._episode

    # -- task generation -------------------------------------------------------------
    def tasks(self, count: int | None = None, seed: int = 0) -> list[Task]:
        """The first `count` tasks (default 30) of the generator for `seed`."""
        result = []
        for index in range(count if count is not None else 30):
            difficulty = self.config.difficulty or index % 3 + 1
            result.append(self._valid_task(seed * 1_000_003 + index, difficulty))
        return result

    def _valid_task(self, world_seed: int, difficulty: int) -> Task:
        while True:
            task = task_for(world_seed, difficulty)
            if task.gold:
                return task
            world_seed += 7_919_000  # a rare world whose goal is met or unreachable: skip it

    def task_by_id(self, task_id: str) -> Task:
        match = _TASK_ID.match(task_id)
        if not match:
            raise UserError(
                f"'{task_id}' is not a household task id; expected household-d<1-3>-<seed>"
            )
        return task_for(int(match.group("seed")), int(match.group("difficulty")))

    # -- the environment protocol -------------------------------------------------------
    @property
    def tools(self) -> list[dict[str, Any]]:
        return TOOLS

    def reset(self, task: Task) -> list[Message]:
        data = task.data if "world_seed" in task.data else self.task_by_id(task.id).data
        world = generate_world(int(data["world_seed"]), int(data["difficulty"]))
        self._episode = Episode(world.layout, world.goal, world.initial.copy())
        intro = f"Your task is to: {world.goal.text()}.\n{self._describe_room()}"
        return [Message(role="system", content=SYSTEM_PROMPT), Message(role="user", content=intro)]

    def step(self, call: ToolCall) -> StepResult:
        handler = self._handlers.get(call.name)
        if handler is None:
            return StepResult(content=f"Unknown tool '{call.name}'.", error=True)
        try:
            args = orjson.loads(call.arguments or "{}")
            content = handler(args if isinstance(args, dict) else {})
        except ToolError as exc:
            return StepResult(content=str(exc), error=True)
        except orjson.JSONDecodeError:
            return StepResult(content="Arguments are not valid JSON.", error=True)
        self._advance_plan(call.name, args)
        world = self.world
        return StepResult(content=content, done=goal_met(world.layout, world.state, world.goal))

    def evaluate(self) -> Outcome:
        world = self._episode
        success = world is not None and goal_met(world.layout, world.state, world.goal)
        return Outcome(success=success, reward=float(success), judged_by="household-goal")

    def snapshot(self) -> Episode:
        return self.world.copy()

    def restore(self, state: Episode) -> None:
        self._episode = state.copy()

    # -- oracle ---------------------------------------------------------------------------
    def _current_plan(self) -> list[oracle.Action] | None:
        """The oracle's plan, kept while the agent follows it (its rest stays optimal)."""
        world = self.world
        if not world.planned:
            world.plan = oracle.plan(world.layout, world.state, world.goal)
            world.planned = True
        return world.plan

    def _advance_plan(self, name: str, args: dict) -> None:
        world = self.world
        if name in _READ_ONLY:
            return
        if world.planned and world.plan and world.plan[0] == (name, args):
            world.plan = world.plan[1:]
        else:
            world.planned = False

    def distance(self) -> int | None:
        plan = self._current_plan()
        return None if plan is None else len(plan)

    def expert_action(self) -> ToolCall | None:
        plan = self._current_plan()
        if not plan:
            return None
        name, args = plan[0]
        return ToolCall(id="", name=name, arguments=orjson.dumps(args).decode())

    def privileged_hint(self) -> str | None:
        """Hidden state the agent would have to search for: where the goal's objects are."""
        world = self._episode
        if world is None:
            return None
        spots = []
        for obj in world.layout.by_type.get(world.goal.obj_type, []):
            where = world.state.place.get(obj)
            if where is not None and where != world.goal.target:
                spots.append(f"{obj} is in {where} ({world.layout.room_of[where]})")
        return "; ".join(spots) + "." if spots else None

    def distractor_action(self, rng: random.Random) -> ToolCall | None:
        """A plausible wrong move: walk elsewhere, take the wrong thing, drop what is held."""
        expert = self.expert_action()
        best = (expert.name, expert.arguments) if expert else None
        options = [move for move in self._plausible_moves() if move != best]
        if not options:
            return None
        name, arguments = rng.choice(options)
        return ToolCall(id="", name=name, arguments=arguments)

    def _plausible_moves(self) -> list[tuple[str, str]]:
        state, layout = self.world.state, self.world.layout
        moves: list[tuple[str, dict[str, str]]] = [
            ("go", {"target": r}) for r in layout.receptacles_in[state.room] if r != state.at
        ]
        moves += [("go", {"target": room}) for room in layout.adjacent[state.room]]
        if state.at is not None and self._reachable(state.at):
            if state.holding is None:
                moves += [("take", {"object": o}) for o in state.contents[state.at]]
            else:
                moves.append(("put", {"object": state.holding, "receptacle": state.at}))
        return [(name, orjson.dumps(args).decode()) for name, args in moves]

    # -- silent faults -------------------------------------------------------------------
    def silent_result(
        self, call: ToolCall, content: str, rng: random.Random
    ) -> tuple[str, str] | None:
        """Hide one object from a 'you see ...' listing."""
        match = re.search(r"you see (.+?)\.", content)
        if not match or match.group(1) == "nothing":
            return None
        items = match.group(1).split(", ")
        hidden = rng.choice(items)
        rest = ", ".join(i for i in items if i != hidden) or "nothing"
        wrong = content[: match.start(1)] + rest + content[match.end(1) :]
        return wrong, f"hid '{hidden}' from the listing"

    # -- descriptions ------------------------------------------------------------------------
    def _describe_room(self) -> str:
        layout, room = self.world.layout, self.world.state.room
        seen = ", ".join(layout.receptacles_in[room]) or "nothing"
        exits = ", ".join(layout.adjacent[room]) or "none"
        return f"You are in the {room}. Here you see {seen}. Exits: {exits}."

    def _describe_receptacle(self, receptacle: str) -> str:
        if not self._reachable(receptacle):
            return f"The {receptacle} is closed."
        items = ", ".join(_article(o) for o in self.world.state.contents[receptacle]) or "nothing"
        return f"On the {receptacle}, you see {items}."

    def _reachable(self, receptacle: str) -> bool:
        world = self.world
        return receptacle not in world.layout.openable or receptacle in world.state.opened

    # -- actions ---------------------------------------------------------------------------
    def _arg(self, args: dict, key: str) -> str:
        value = args.get(key)
        if not isinstance(value, str) or not value:
            raise ToolError(f"Nothing happens: missing argument '{key}'.")
        return value.strip()

    def _do_go(self, args: dict) -> str:
        target, state, layout = self._arg(args, "target"), self.world.state, self.world.layout
        if target in layout.adjacent[state.room]:
            state.room, state.at = target, None
            return self._describe_room()
        if layout.room_of.get(target) == state.room:
            state.at = target
            return f"You arrive at {target}. {self._describe_receptacle(target)}"
        if target == state.room:
            raise ToolError(f"Nothing happens: you are already in the {target}.")
        raise ToolError(f"Nothing happens: you cannot reach '{target}' from here.")

    def _here(self, target: str) -> str:
        if target != self.world.state.at:
            raise ToolError(f"Nothing happens: you are not at '{target}'.")
        return target

    def _do_open(self, args: dict) -> str:
        target, world = self._here(self._arg(args, "target")), self.world
        if target not in world.layout.openable or target in world.state.opened:
            raise ToolError(f"Nothing happens: {target} cannot be opened.")
        world.state.opened.add(target)
        items = ", ".join(_article(o) for o in world.state.contents[target]) or "nothing"
        return f"You open the {target}. In it, you see {items}."

    def _do_close(self, args: dict) -> str:
        target, state = self._here(self._arg(args, "target")), self.world.state
        if target not in state.opened:
            raise ToolError(f"Nothing happens: {target} is not open.")
        state.opened.discard(target)
        return f"You close the {target}."

    def _do_take(self, args: dict) -> str:
        obj, state = self._arg(args, "object"), self.world.state
        if state.holding is not None:
            raise ToolError(f"Nothing happens: you are already holding {state.holding}.")
        if state.at is None or obj not in state.contents[state.at] or not self._reachable(state.at):
            raise ToolError(f"Nothing happens: there is no {obj} here.")
        state.contents[state.at].remove(obj)
        state.place[obj], state.holding = None, obj
        return f"You pick up the {obj} from the {state.at}."

    def _do_put(self, args: dict) -> str:
        obj, state = self._arg(args, "object"), self.world.state
        receptacle = self._here(self._arg(args, "receptacle"))
        if state.holding != obj:
            raise ToolError(f"Nothing happens: you are not holding {obj}.")
        if not self._reachable(receptacle):
            raise ToolError(f"Nothing happens: the {receptacle} is closed.")
        state.contents[receptacle].append(obj)
        state.place[obj], state.holding = receptacle, None
        return f"You put the {obj} in/on the {receptacle}."

    def _treat(self, action: str, args: dict) -> str:
        obj, state = self._arg(args, "object"), self.world.state
        prop, appliance = _TREATED[action]
        if state.holding != obj:
            raise ToolError(f"Nothing happens: you are not holding {obj}.")
        if state.at is None or self.world.layout.kind_of[state.at] != appliance:
            raise ToolError(f"Nothing happens: you need to be at a {appliance} to {action}.")
        flags = state.props[obj] | FLAG[prop]
        if prop in ("hot", "cool"):
            flags &= ~FLAG["cool" if prop == "hot" else "hot"]
        state.props[obj] = flags
        return f"You {action} the {obj} using the {state.at}."

    def _do_clean(self, args: dict) -> str:
        return self._treat("clean", args)

    def _do_heat(self, args: dict) -> str:
        return self._treat("heat", args)

    def _do_cool(self, args: dict) -> str:
        return self._treat("cool", args)

    def _do_examine(self, args: dict) -> str:
        target, state = self._arg(args, "target"), self.world.state
        if target == state.at:
            return self._describe_receptacle(target)
        at = state.at
        in_view = at is not None and self._reachable(at) and target in state.contents[at]
        if target == state.holding or in_view:
            flags = state.props[target]
            words = [name for name, bit in FLAG.items() if flags & bit] or ["ordinary"]
            return f"This is {_article(target)}. It is {' and '.join(words)}."
        raise ToolError(f"Nothing happens: you see no {target} here.")

    def _do_look(self, args: dict) -> str:
        at = self.world.state.at
        if at is None:
            return self._describe_room()
        return f"You are at {at}. {self._describe_receptacle(at)}"

    def _do_inventory(self, args: dict) -> str:
        held = self.world.state.holding
        return f"You are carrying: {held}." if held else "You are not carrying anything."
