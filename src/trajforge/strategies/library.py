"""The strategy library: `Strategy` documents in the store's `strategies` table, versioned.

`save` writes a strategy as the next version of its name unless the latest version already
says the same (text, scope, rule, source, evidence and effect alike): re-distilling unchanged
runs adds nothing, an edit or a changed measurement adds a version, and no row is rewritten.
"""

from __future__ import annotations

import time

import orjson

from trajforge.errors import UserError
from trajforge.schema import Strategy
from trajforge.store.sqlite import Store
from trajforge.store.strategies import (
    StrategyRow,
    insert_strategy,
    latest_strategies,
    strategy_names,
    strategy_versions,
)


class UnknownStrategy(UserError):
    """No stored strategy has that name (or name prefix), or more than one does."""


def _content(strategy: Strategy) -> dict:
    return strategy.model_dump(mode="json", exclude={"version", "created_at"})


def _decode(row: StrategyRow) -> Strategy:
    return Strategy.model_validate_json(row.doc)


def save(store: Store, strategy: Strategy) -> Strategy | None:
    """Store `strategy` as its name's next version; None when the latest is the same."""
    with store.transaction():
        versions = strategy_versions(store, strategy.name)
        if versions and _content(_decode(versions[-1])) == _content(strategy):
            return None
        stored = strategy.model_copy(
            update={"version": len(versions) + 1, "created_at": time.time()}
        )
        insert_strategy(
            store,
            StrategyRow(
                stored.name,
                stored.version,
                stored.scope.environment,
                stored.source,
                stored.created_at,
                orjson.dumps(stored.model_dump(mode="json")),
            ),
        )
    return stored


def save_all(store: Store, strategies: list[Strategy]) -> list[Strategy]:
    """Save each in one transaction; returns the versions written."""
    with store.transaction():
        written = [save(store, strategy) for strategy in strategies]
    return [strategy for strategy in written if strategy is not None]


def latest(store: Store, environment: str | None = None) -> list[Strategy]:
    """The latest version of every strategy (of one environment), by name."""
    return [_decode(row) for row in latest_strategies(store, environment)]


def versions(store: Store, name: str) -> list[Strategy]:
    """Every version of the strategy named `name` or by a unique prefix of its name."""
    return [_decode(row) for row in strategy_versions(store, resolve(store, name))]


def resolve(store: Store, prefix: str) -> str:
    names = strategy_names(store, prefix)
    if prefix in names:
        return prefix
    if len(names) == 1:
        return names[0]
    if not names:
        raise UnknownStrategy(f"no strategy named {prefix!r} (see `trajforge strategies ls`)")
    shown = ", ".join(names[:5])
    raise UnknownStrategy(f"{prefix!r} names {len(names)} strategies ({shown}...); say more")
