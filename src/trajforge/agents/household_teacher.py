"""Household teachers that act only on what the transcript shows.

The household oracle (`ExpertPolicy`) is *privileged*: it reads the world state and walks
straight to the closed cabinet that holds the mug. That makes it the right tool to localize
and verify errors, and the wrong one to imitate: a student sees only the transcript, so the
oracle's choices are not a function of the student's input. `ObservableTeacher` is built
from the transcript alone: it rebuilds what the agent has seen (rooms, receptacles, exits,
contents of opened or visited receptacles, what it holds and what it treated) and acts on
that: walk to the next unexplored receptacle (opening it if closed), take a goal object once
one is seen, treat it at the right appliance, deliver it. Its demonstrations are learnable.

`NoisyObservableTeacher` makes labelled mistakes with a seeded probability (a visible wrong
move: another receptacle or room, taking the wrong object, dropping what it holds), for
teacher failures and recovery demonstrations. After a mistake the teacher simply re-reads
the transcript, so its continuation is a recovery.

Both take strategies as hints (`PolicyOptions.strategies`, by task id): a strategy that orders
two kinds of receptacle ("Before you go to a drawer, go to a countertop first.", the wording of
`trajforge.strategies`' household rules) moves the first kind ahead of the second in the order
the teacher explores a room's receptacles. Other strategy texts are not understood and change
nothing: this is a scripted reader of one rule form, not a language model.
"""

from __future__ import annotations

import random
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import BaseModel, Field

from trajforge.agents.base import EpisodeState, PolicyStep
from trajforge.agents.spec import ForkPoint, PolicyOptions
from trajforge.envs.household.world import APPLIANCES, OBJECT_PROPERTIES
from trajforge.schema import Label, Message, ToolCall

Action = tuple[str, dict[str, str]]
_GOAL = re.compile(
    r"Your task is to: put (?:an? |(?P<count>\d+) )(?P<prop>clean |hot |cool )?(?P<obj>\w+) "
    r"in (?P<target>.+?)\.$",
    re.MULTILINE,
)
_ROOM = re.compile(
    r"You are in the (?P<room>.+?)\. Here you see (?P<seen>.+?)\. Exits: (?P<exits>.+?)\."
)
_SEEN = re.compile(r"(?:On the (?P<on>.+?), you see|In it, you see) (?P<items>.+?)\.")
_ARRIVE = re.compile(r"You (?:arrive at|are at) (?P<at>.+?)\. ")
_CLOSED = re.compile(r"The (?P<what>.+?) is closed\.")
_OPEN = re.compile(r"You open the (?P<what>.+?)\. In it")
_CLOSE = re.compile(r"You close the (?P<what>.+?)\.")
_TAKE = re.compile(r"You pick up the (?P<obj>.+?) from the (?P<src>.+?)\.")
_PUT = re.compile(r"You put the (?P<obj>.+?) in/on the (?P<dst>.+?)\.")
_TREAT = re.compile(r"You (?P<verb>clean|heat|cool) the (?P<obj>.+?) using the")
_ORDER_HINT = re.compile(
    r"Before you (?:go to|open) an? (?P<then>\w+), (?:go to|open) an? (?P<first>\w+) first\."
)
_VERB_PROP = {"clean": "clean", "heat": "hot", "cool": "cool"}
_PROP_VERB = {prop: verb for verb, prop in _VERB_PROP.items()}


def kind(name: str) -> str:
    """`cabinet 2` -> `cabinet`, `apple 1` -> `apple`."""
    return name.rsplit(" ", 1)[0]


def _singular(word: str) -> str:
    for candidate in (word, word.removesuffix("es"), word.removesuffix("s")):
        if candidate in OBJECT_PROPERTIES:
            return candidate
    return word


@dataclass
class Seen:
    """What the transcript shows about the household so far."""

    obj_type: str = ""
    prop: str | None = None
    target: str = ""
    count: int = 1
    room: str = ""
    at: str | None = None
    holding: str | None = None
    rooms: dict[str, list[str]] = field(default_factory=dict)
    exits: dict[str, list[str]] = field(default_factory=dict)
    room_of: dict[str, str] = field(default_factory=dict)
    contents: dict[str, list[str]] = field(default_factory=dict)
    closed: set[str] = field(default_factory=set)
    treated: dict[str, set[str]] = field(default_factory=dict)
    preferred: dict[str, int] = field(default_factory=dict)
    """Receptacle kind -> exploration rank from hints (0 early, 2 late; others 1)."""

    def read(self, text: str) -> None:
        """Update from one user or tool message."""
        if goal := _GOAL.search(text):
            self.obj_type = _singular(goal.group("obj"))
            self.prop = (goal.group("prop") or "").strip() or None
            self.target = goal.group("target")
            self.count = int(goal.group("count") or 1)
        if room := _ROOM.search(text):
            self._enter(room.group("room"), room.group("seen"), room.group("exits"))
        elif text.startswith("Nothing happens"):
            return
        self._read_action(text)

    def _enter(self, room: str, seen: str, exits: str) -> None:
        self.room, self.at = room, None
        receptacles = [] if seen == "nothing" else seen.split(", ")
        self.rooms[room] = receptacles
        self.exits[room] = [] if exits == "none" else exits.split(", ")
        for name in receptacles:
            self.room_of[name] = room

    def _read_action(self, text: str) -> None:
        if arrive := _ARRIVE.search(text):
            self.at = arrive.group("at")
        if closed := _CLOSED.search(text):
            self.closed.add(closed.group("what"))
        if opened := _OPEN.search(text):
            self.closed.discard(opened.group("what"))
        if shut := _CLOSE.search(text):
            self.closed.add(shut.group("what"))
        seen = _SEEN.search(text)
        where = (seen.group("on") or self.at) if seen else None
        if seen and where is not None:
            items = seen.group("items")
            self.contents[where] = (
                [] if items == "nothing" else [_strip(i) for i in items.split(", ")]
            )
        if take := _TAKE.search(text):
            self.holding = take.group("obj")
            items = self.contents.get(take.group("src"), [])
            if take.group("obj") in items:
                items.remove(take.group("obj"))
        if put := _PUT.search(text):
            self.holding = None
            self.contents.setdefault(put.group("dst"), []).append(put.group("obj"))
        if treat := _TREAT.search(text):
            props = self.treated.setdefault(treat.group("obj"), set())
            prop = _VERB_PROP[treat.group("verb")]
            props -= {"hot", "cool"} if prop in ("hot", "cool") else set()
            props.add(prop)

    def ready(self, obj: str) -> bool:
        """`obj` is a goal object with the goal's property (as far as the transcript shows)."""
        if kind(obj) != self.obj_type:
            return False
        return self.prop is None or self.prop in self.treated.get(obj, set())

    def placed(self) -> int:
        return sum(self.ready(obj) for obj in self.contents.get(self.target, []))


def _strip(item: str) -> str:
    return item.removeprefix("an ").removeprefix("a ")


def read_transcript(messages: list[Message]) -> Seen:
    """Everything the agent has been shown, rebuilt from its user and tool messages."""
    seen = Seen()
    for message in messages:
        if message.role in ("user", "tool"):
            seen.read(message.text())
    return seen


def teacher_action(seen: Seen) -> Action | None:
    """The observable teacher's next action (None: nothing left it knows how to do)."""
    if seen.holding is not None:
        return _with_held(seen, seen.holding)
    if seen.placed() >= seen.count:
        return None
    for where, items in seen.contents.items():
        if where == seen.target or where in seen.closed:
            continue
        for obj in items:
            if kind(obj) == seen.obj_type:
                return _fetch(seen, obj, where)
    return _explore(seen)


def _with_held(seen: Seen, held: str) -> Action | None:
    if kind(held) != seen.obj_type:
        return _drop(seen, held)
    if seen.prop is not None and not seen.ready(held):
        appliance_kind = APPLIANCES[seen.prop]
        here = [r for r in seen.rooms.get(seen.room, []) if kind(r) == appliance_kind]
        if seen.at in here:
            return _PROP_VERB[seen.prop], {"object": held}
        if here:
            return "go", {"target": here[0]}
        known = [r for r in seen.room_of if kind(r) == appliance_kind]
        return _travel(seen, seen.room_of[known[0]]) if known else _explore_rooms(seen)
    return _deliver(seen, held)


def _deliver(seen: Seen, held: str) -> Action | None:
    target = seen.target
    if target not in seen.room_of:
        return _explore_rooms(seen)
    if seen.room_of[target] != seen.room:
        return _travel(seen, seen.room_of[target])
    if seen.at != target:
        return "go", {"target": target}
    if target in seen.closed:
        return "open", {"target": target}
    return "put", {"object": held, "receptacle": target}


def _drop(seen: Seen, held: str) -> Action | None:
    """Put a wrong object back down where the agent stands (or at the first open spot)."""
    if seen.at is not None and seen.at not in seen.closed:
        return "put", {"object": held, "receptacle": seen.at}
    spots = [r for r in seen.rooms.get(seen.room, []) if r not in seen.closed]
    return ("go", {"target": spots[0]}) if spots else None


def _fetch(seen: Seen, obj: str, where: str) -> Action | None:
    if seen.room_of.get(where) != seen.room:
        return _travel(seen, seen.room_of[where])
    if seen.at != where:
        return "go", {"target": where}
    return "take", {"object": obj}


def _explore(seen: Seen) -> Action | None:
    """Visit the first unexplored storage receptacle of this room, else another room."""
    if seen.at is not None and seen.at in seen.closed and seen.at not in seen.contents:
        return "open", {"target": seen.at}
    for receptacle in _exploration_order(seen, seen.rooms.get(seen.room, [])):
        if receptacle not in seen.contents:
            return "go", {"target": receptacle}
    return _explore_rooms(seen, search=True)


def _exploration_order(seen: Seen, receptacles: list[str]) -> list[str]:
    appliances = set(APPLIANCES.values())
    late = {r for r in receptacles if kind(r) in appliances or r == seen.target}
    ranked = sorted(receptacles, key=lambda r: seen.preferred.get(kind(r), 1))
    return [r for r in ranked if r not in late] + [r for r in ranked if r in late]


def hint_ranks(hints: list[str]) -> dict[str, int]:
    """Exploration ranks from the order hints among `hints` (the first hint about a kind wins)."""
    ranks: dict[str, int] = {}
    for hint in hints:
        for match in _ORDER_HINT.finditer(hint):
            ranks.setdefault(match.group("first"), 0)
            ranks.setdefault(match.group("then"), 2)
    return ranks


def _explore_rooms(seen: Seen, search: bool = False) -> Action | None:
    """Walk toward the nearest room not yet entered (with `search`, or not yet searched)."""
    unseen = {room for exits in seen.exits.values() for room in exits if room not in seen.rooms}

    def wanted(room: str) -> bool:
        if room in unseen:
            return True
        return search and any(r not in seen.contents for r in seen.rooms.get(room, []))

    step = _first_step(seen, wanted)
    return ("go", {"target": step}) if step else None


def _travel(seen: Seen, room: str) -> Action | None:
    step = _first_step(seen, lambda candidate: candidate == room)
    return ("go", {"target": step}) if step else None


def _first_step(seen: Seen, wanted) -> str | None:
    """First room on a shortest known path from the current room to a wanted room."""
    first: dict[str, str] = {}
    queue = deque([seen.room])
    visited = {seen.room}
    while queue:
        room = queue.popleft()
        for nxt in seen.exits.get(room, []):
            if nxt in visited:
                continue
            visited.add(nxt)
            first[nxt] = nxt if room == seen.room else first[room]
            if wanted(nxt):
                return first[nxt]
            queue.append(nxt)
    return None


def _as_step(action: Action | None, step: int, suffix: str = "") -> PolicyStep:
    if action is None:
        return PolicyStep(message=Message(role="assistant", content="I am done."))
    name, args = action
    call = ToolCall(id=f"call_{step}{suffix}", name=name, arguments=orjson.dumps(args).decode())
    return PolicyStep(message=Message(role="assistant", content=None, tool_calls=[call]))


def _read(state: EpisodeState, strategies: dict[str, list[str]]) -> Seen:
    seen = read_transcript(state.messages)
    seen.preferred = hint_ranks(strategies.get(state.task.id, []))
    return seen


class ObservableTeacher:
    """Household teacher that uses only the transcript and hints (see module docstring)."""

    name = "household-teacher"

    def __init__(self, strategies: dict[str, list[str]] | None = None) -> None:
        self.strategies = strategies or {}

    @classmethod
    def from_spec(
        cls, options: PolicyOptions, seed: int, parent: ForkPoint | None
    ) -> ObservableTeacher:
        """With the options' strategies as hints."""
        return cls(options.strategies)

    def act(self, state: EpisodeState) -> PolicyStep:
        return _as_step(teacher_action(_read(state, self.strategies)), state.step)


class NoisyTeacherConfig(BaseModel):
    """How often and how reproducibly the noisy teacher errs."""

    error_rate: float = Field(default=0.2, ge=0.0, le=1.0, description="Chance of a mistake.")
    seed: int = Field(default=0, description="Seed of the mistake generator.")


class NoisyObservableTeacher:
    """The observable teacher with labelled, visible mistakes at rate `error_rate`."""

    name = "noisy-household-teacher"

    def __init__(
        self,
        config: NoisyTeacherConfig | None = None,
        strategies: dict[str, list[str]] | None = None,
        **overrides: Any,
    ) -> None:
        self.config = (config or NoisyTeacherConfig()).model_copy(update=overrides)
        self.rng = random.Random(self.config.seed)
        self.strategies = strategies or {}

    @classmethod
    def from_spec(
        cls, options: PolicyOptions, seed: int, parent: ForkPoint | None
    ) -> NoisyObservableTeacher:
        """Mistakes at the options' error rate, drawn from the episode seed; the options'
        strategies as hints."""
        config = NoisyTeacherConfig(error_rate=options.error_rate, seed=seed)
        return cls(config, options.strategies)

    def act(self, state: EpisodeState) -> PolicyStep:
        seen = _read(state, self.strategies)
        right = teacher_action(seen)
        if self.rng.random() < self.config.error_rate:
            wrong = [move for move in visible_moves(seen) if move != right]
            if wrong:
                move = self.rng.choice(wrong)
                step = _as_step(move, state.step, "_noise")
                step.label = Label(
                    category="deliberate_error",
                    reason=f"noisy teacher took {move[0]}({orjson.dumps(move[1]).decode()}) "
                    "instead of the teacher action",
                    source="oracle",
                    agent="assistant",
                )
                return step
        return _as_step(right, state.step)


def visible_moves(seen: Seen) -> list[Action]:
    """Plausible moves the transcript allows: walk, take what is seen here, drop what is held."""
    moves: list[Action] = [
        ("go", {"target": r}) for r in seen.rooms.get(seen.room, []) if r != seen.at
    ]
    moves += [("go", {"target": room}) for room in seen.exits.get(seen.room, [])]
    if seen.at is not None and seen.at not in seen.closed:
        if seen.holding is None:
            moves += [("take", {"object": o}) for o in seen.contents.get(seen.at, [])]
        else:
            moves.append(("put", {"object": seen.holding, "receptacle": seen.at}))
    return moves
