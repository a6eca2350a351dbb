"""The household oracle: shortest plans to the goal.

Moving between rooms uses the BFS tables of the layout (computed once per layout). A plan
fetches `count` goal objects one at a time; for every order of candidate objects it chains
the legs (walk, open, drop what is held, take, walk to the nearest suitable appliance,
treat, walk to the target, open, put) and keeps the shortest. The plan is the sequence of
tool calls; `distance()` is its length.
"""

from __future__ import annotations

from itertools import permutations

from trajforge.envs.household.world import FLAG, Goal, Layout, State, satisfies

Action = tuple[str, dict[str, str]]
TREATMENT = {"clean": "clean", "hot": "heat", "cool": "cool"}


def move_cost(layout: Layout, room: str, at: str | None, dest: str) -> int:
    """Fewest `go` actions from (room, at) to receptacle `dest`."""
    dest_room = layout.room_of[dest]
    if dest_room == room:
        return 0 if at == dest else 1
    return layout.room_dist[room][dest_room] + 1


def moves(layout: Layout, room: str, at: str | None, dest: str) -> list[Action]:
    """The `go` actions from (room, at) to receptacle `dest`."""
    dest_room = layout.room_of[dest]
    actions: list[Action] = []
    while room != dest_room:
        room = layout.next_room[room][dest_room]
        actions.append(("go", {"target": room}))
        at = None
    if at != dest:
        actions.append(("go", {"target": dest}))
    return actions


class _Walk:
    """A plan under construction: the simulated agent position, hand and open receptacles."""

    def __init__(self, layout: Layout, state: State) -> None:
        self.layout = layout
        self.room = state.room
        self.at = state.at
        self.holding = state.holding
        self.opened = set(state.opened)
        self.actions: list[Action] = []

    def go(self, dest: str) -> None:
        self.actions += moves(self.layout, self.room, self.at, dest)
        self.room, self.at = self.layout.room_of[dest], dest

    def open_here(self) -> None:
        if self.at in self.layout.openable and self.at not in self.opened:
            self.actions.append(("open", {"target": self.at}))
            self.opened.add(self.at)

    def fetch(self, obj: str, source: str) -> None:
        self.go(source)
        self.open_here()
        if self.holding is not None:
            self.actions.append(("put", {"object": self.holding, "receptacle": source}))
        self.actions.append(("take", {"object": obj}))
        self.holding = obj

    def treat(self, obj: str, prop: str, target: str) -> None:
        appliances = self.layout.appliances[prop]
        best = min(
            appliances,
            key=lambda a: (
                move_cost(self.layout, self.room, self.at, a)
                + move_cost(self.layout, self.layout.room_of[a], a, target),
                a,
            ),
        )
        self.go(best)
        self.actions.append((TREATMENT[prop], {"object": obj}))

    def deliver(self, obj: str, target: str) -> None:
        self.go(target)
        self.open_here()
        self.actions.append(("put", {"object": obj, "receptacle": target}))
        self.holding = None


def plan(layout: Layout, state: State, goal: Goal) -> list[Action] | None:
    """The shortest plan to the goal ([] when met), or None when it cannot be reached."""
    placed = [o for o in state.contents[goal.target] if satisfies(layout, state, goal, o)]
    needed = goal.count - len(placed)
    if needed <= 0:
        return []
    if goal.prop is not None and not layout.appliances.get(goal.prop):
        return None
    candidates = [o for o in layout.by_type.get(goal.obj_type, []) if o not in placed]
    best: list[Action] | None = None
    for order in permutations(candidates, needed):
        if state.holding in candidates and order[0] != state.holding:
            continue
        actions = _plan_order(layout, state, goal, order)
        if best is None or len(actions) < len(best):
            best = actions
    return best


def _plan_order(layout: Layout, state: State, goal: Goal, order: tuple[str, ...]) -> list[Action]:
    walk = _Walk(layout, state)
    for obj in order:
        if walk.holding != obj:
            where = state.place[obj]
            assert where is not None, "only the object held at the start has no place"
            walk.fetch(obj, where)
        if goal.prop is not None and not state.props[obj] & FLAG[goal.prop]:
            walk.treat(obj, goal.prop, goal.target)
        walk.deliver(obj, goal.target)
    return walk.actions
