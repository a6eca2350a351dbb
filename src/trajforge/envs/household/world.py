"""Household worlds: a static layout (rooms, receptacles, objects), a mutable state, a goal.

`generate_world(world_seed, difficulty)` builds the same world from the same arguments.
Room-to-room shortest paths are computed once per layout by BFS and kept in the layout.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache

ROOM_RECEPTACLES: dict[str, tuple[str, ...]] = {
    "kitchen": ("countertop", "cabinet", "drawer", "shelf", "coffeemachine", "stoveburner"),
    "living room": ("sofa", "coffeetable", "tvstand", "shelf", "drawer", "sidetable"),
    "bedroom": ("bed", "desk", "dresser", "drawer", "shelf", "safe"),
    "bathroom": ("countertop", "cabinet", "towelholder", "bathtubbasin", "shelf"),
    "office": ("desk", "shelf", "drawer", "safe", "sidetable"),
    "garage": ("shelf", "cabinet", "workbench", "garbagecan"),
    "hallway": ("shelf", "sidetable", "drawer"),
    "dining room": ("diningtable", "cabinet", "shelf", "sidetable"),
}
APPLIANCES = {"clean": "sinkbasin", "hot": "microwave", "cool": "fridge"}
OPENABLE_KINDS = frozenset({"fridge", "microwave", "cabinet", "drawer", "safe"})
OBJECT_PROPERTIES: dict[str, tuple[str, ...]] = {
    "mug": ("clean", "hot", "cool"),
    "cup": ("clean", "hot", "cool"),
    "plate": ("clean", "hot", "cool"),
    "bowl": ("clean", "hot", "cool"),
    "apple": ("clean", "hot", "cool"),
    "potato": ("clean", "hot", "cool"),
    "egg": ("hot", "cool"),
    "tomato": ("clean", "cool"),
    "bread": ("hot", "cool"),
    "knife": ("clean",),
    "spoon": ("clean",),
    "pan": ("clean", "cool"),
    "cloth": ("clean",),
    "book": (),
    "pen": (),
    "cellphone": (),
    "keychain": (),
    "candle": (),
    "remotecontrol": (),
    "vase": (),
}
FLAG = {"clean": 1, "hot": 2, "cool": 4}
DIFFICULTIES = {
    1: {"rooms": 1, "receptacles": 6, "objects": 6, "count": 1, "props": False, "hide": 0.2},
    2: {"rooms": 3, "receptacles": 11, "objects": 10, "count": 1, "props": True, "hide": 0.4},
    3: {"rooms": 5, "receptacles": 16, "objects": 16, "count": 2, "props": True, "hide": 0.7},
}


@dataclass(frozen=True, slots=True)
class Goal:
    """Put `count` objects of `obj_type` having `prop` (if any) in `target`."""

    obj_type: str
    prop: str | None
    target: str
    count: int = 1

    def text(self) -> str:
        adjective = {"clean": "clean ", "hot": "hot ", "cool": "cool ", None: ""}[self.prop]
        if self.count == 1:
            article = "an" if (adjective or self.obj_type)[0] in "aeiou" else "a"
            return f"put {article} {adjective}{self.obj_type} in {self.target}"
        plural = self.obj_type + ("es" if self.obj_type.endswith("o") else "s")
        return f"put {self.count} {adjective}{plural} in {self.target}"


@dataclass(slots=True)
class Layout:
    """What does not change during an episode."""

    rooms: list[str]
    adjacent: dict[str, list[str]]
    room_of: dict[str, str]
    receptacles_in: dict[str, list[str]]
    openable: frozenset[str]
    kind_of: dict[str, str]
    obj_type: dict[str, str]
    by_type: dict[str, list[str]] = field(default_factory=dict)
    appliances: dict[str, list[str]] = field(default_factory=dict)
    room_dist: dict[str, dict[str, int]] = field(default_factory=dict)
    next_room: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass(slots=True)
class State:
    """Everything that changes: where the agent is, what it holds, where things are."""

    room: str
    at: str | None
    holding: str | None
    place: dict[str, str | None]
    contents: dict[str, list[str]]
    opened: set[str]
    props: dict[str, int]

    def copy(self) -> State:
        return State(
            self.room,
            self.at,
            self.holding,
            dict(self.place),
            {name: list(items) for name, items in self.contents.items()},
            set(self.opened),
            dict(self.props),
        )


@dataclass(frozen=True, slots=True)
class World:
    layout: Layout
    initial: State
    goal: Goal


def _bfs_tables(layout: Layout) -> None:
    for start in layout.rooms:
        dist = {start: 0}
        first: dict[str, str] = {}
        queue = deque([start])
        while queue:
            room = queue.popleft()
            for nxt in layout.adjacent[room]:
                if nxt not in dist:
                    dist[nxt] = dist[room] + 1
                    first[nxt] = nxt if room == start else first[room]
                    queue.append(nxt)
        layout.room_dist[start] = dist
        layout.next_room[start] = first


def _rooms(rng: random.Random, count: int) -> tuple[list[str], dict[str, list[str]]]:
    others = [name for name in ROOM_RECEPTACLES if name != "kitchen"]
    rooms = ["kitchen", *rng.sample(others, count - 1)]
    adjacent: dict[str, list[str]] = {room: [] for room in rooms}
    for index in range(1, count):
        other = rooms[rng.randrange(index)]
        adjacent[rooms[index]].append(other)
        adjacent[other].append(rooms[index])
    return rooms, adjacent


def _receptacles(rng: random.Random, rooms: list[str], total: int, props: bool) -> list[tuple]:
    chosen = [("kitchen", "countertop"), ("kitchen", "sinkbasin")]
    if props:
        chosen += [("kitchen", "microwave"), ("kitchen", "fridge")]
    pool = [(room, kind) for room in rooms for kind in ROOM_RECEPTACLES[room]]
    rng.shuffle(pool)
    for pair in pool:
        if len(chosen) >= total:
            break
        if pair not in chosen or rng.random() < 0.3:
            chosen.append(pair)
    return chosen


def _name_all(kinds: list[str]) -> list[str]:
    counters: dict[str, int] = {}
    names = []
    for kind in kinds:
        counters[kind] = counters.get(kind, 0) + 1
        names.append(f"{kind} {counters[kind]}")
    return names


def _object_types(rng: random.Random, total: int, count: int) -> list[str]:
    """Random object types; at least one type occurs `count` times (a goal needs that many).

    When the draw has no such type, the last objects become copies of the first object's
    type: the draw (and so every other world) is unchanged, only the rare failing world is.
    """
    types = [rng.choice(list(OBJECT_PROPERTIES)) for _ in range(total)]
    if max(types.count(kind) for kind in types) < count:
        types[total - count + 1 :] = [types[0]] * (count - 1)
    return types


def _build_layout(rng: random.Random, config: dict) -> Layout:
    rooms, adjacent = _rooms(rng, config["rooms"])
    pairs = _receptacles(rng, rooms, config["receptacles"], config["props"])
    names = _name_all([kind for _, kind in pairs])
    room_of = {name: room for name, (room, _) in zip(names, pairs, strict=True)}
    kind_of = {name: kind for name, (_, kind) in zip(names, pairs, strict=True)}
    types = _object_types(rng, config["objects"], config["count"])
    objects = _name_all(types)
    layout = Layout(
        rooms=rooms,
        adjacent=adjacent,
        room_of=room_of,
        receptacles_in={room: [n for n in names if room_of[n] == room] for room in rooms},
        openable=frozenset(n for n in names if kind_of[n] in OPENABLE_KINDS),
        kind_of=kind_of,
        obj_type=dict(zip(objects, types, strict=True)),
    )
    for obj, kind in layout.obj_type.items():
        layout.by_type.setdefault(kind, []).append(obj)
    for prop, kind in APPLIANCES.items():
        layout.appliances[prop] = [n for n in names if kind_of[n] == kind]
    _bfs_tables(layout)
    return layout


def _goal(rng: random.Random, layout: Layout, config: dict) -> Goal:
    storage = [n for n in layout.room_of if layout.kind_of[n] not in APPLIANCES.values()]
    count = config["count"]
    candidates = [t for t, objs in layout.by_type.items() if len(objs) >= count]
    treatable = [t for t in candidates if any(layout.appliances[p] for p in OBJECT_PROPERTIES[t])]
    if config["props"] and treatable:
        candidates = treatable
    obj_type = rng.choice(sorted(candidates))
    usable = [p for p in OBJECT_PROPERTIES[obj_type] if layout.appliances[p]]
    prop = rng.choice(usable) if config["props"] and usable else None
    return Goal(obj_type=obj_type, prop=prop, target=rng.choice(storage), count=count)


def _initial_state(rng: random.Random, layout: Layout, goal: Goal, hide: float) -> State:
    storage = [n for n in layout.room_of if layout.kind_of[n] not in APPLIANCES.values()]
    hidden = [n for n in storage if n in layout.openable and n != goal.target]
    shown = [n for n in storage if n not in layout.openable and n != goal.target] or storage
    contents: dict[str, list[str]] = {name: [] for name in layout.room_of}
    place: dict[str, str | None] = {}
    for obj in layout.obj_type:
        spots = hidden if hidden and rng.random() < hide else shown
        spot = rng.choice(spots)
        place[obj] = spot
        contents[spot].append(obj)
    start = rng.choice(layout.rooms)
    return State(start, None, None, place, contents, set(), dict.fromkeys(place, 0))


@lru_cache(maxsize=4096)
def generate_world(world_seed: int, difficulty: int) -> World:
    """The world of a task; cached, so treat the result as read-only (copy the state)."""
    config = DIFFICULTIES[difficulty]
    rng = random.Random(world_seed * 10 + difficulty)
    layout = _build_layout(rng, config)
    goal = _goal(rng, layout, config)
    return World(layout, _initial_state(rng, layout, goal, config["hide"]), goal)


def satisfies(layout: Layout, state: State, goal: Goal, obj: str) -> bool:
    """`obj` is of the goal's type and has the goal's property."""
    if layout.obj_type[obj] != goal.obj_type:
        return False
    return goal.prop is None or bool(state.props[obj] & FLAG[goal.prop])


def goal_met(layout: Layout, state: State, goal: Goal) -> bool:
    placed = [o for o in state.contents[goal.target] if satisfies(layout, state, goal, o)]
    return len(placed) >= goal.count
