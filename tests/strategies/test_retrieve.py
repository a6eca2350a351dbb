"""Retrieval: BM25 and all-MiniLM-L6-v2 embeddings rank a task's own family's strategy first."""

from __future__ import annotations

import pytest

from trajforge.errors import UserError
from trajforge.schema import Strategy, StrategyRule, StrategyScope, Task
from trajforge.strategies.retrieve import RETRIEVERS, retriever, task_query, tokens


def _strategy(name: str, environment: str, first: str, then: str, text: str) -> Strategy:
    return Strategy(
        name=name,
        text=text,
        scope=StrategyScope(environment=environment, situation=f"before the first {then}"),
        rule=StrategyRule(first=first, then=then),
        source="contrast",
    )


LIBRARY = [
    _strategy(
        "tau-retail/auth",
        "tau-retail",
        "find_user_id_by_email",
        "modify_pending_order_items",
        "Call `find_user_id_by_email` before the first `modify_pending_order_items`.",
    ),
    _strategy(
        "tau-airline/details",
        "tau-airline",
        "get_reservation_details",
        "search_direct_flight",
        "Call `get_reservation_details` before the first `search_direct_flight`.",
    ),
    _strategy(
        "household-d3/cabinet",
        "household",
        "go:cabinet",
        "go:countertop",
        "Before you go to a countertop, go to a cabinet first.",
    ),
]
RETAIL_TASK = Task(
    id="7",
    environment="tau-retail",
    instruction="You want to change the items of your pending order #W123 to a red one.",
)


@pytest.mark.parametrize("kind", sorted(RETRIEVERS))
def test_each_retriever_puts_the_tasks_own_family_first(kind: str):
    ranked = retriever(kind, LIBRARY).rank(task_query(RETAIL_TASK), 3)
    assert ranked[0].strategy.name == "tau-retail/auth"
    household = Task(id="h", environment="household", instruction="put a clean mug in cabinet 1")
    assert retriever(kind, LIBRARY).rank(task_query(household), 1)[0].strategy.name == (
        "household-d3/cabinet"
    )


def test_a_running_episode_adds_its_last_messages_to_the_query():
    from trajforge.schema import Message

    query = task_query(RETAIL_TASK, [Message(role="user", content="my flight reservation")])
    assert "reservation" in tokens(query)


def test_an_unknown_retriever_names_the_known_ones():
    with pytest.raises(UserError, match="known: embedding, lexical"):
        retriever("dense", LIBRARY)
