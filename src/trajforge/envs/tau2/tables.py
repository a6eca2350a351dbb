"""The bundled tau2 domain data: databases, tasks and policies (see `data/LICENSE.md`).

Records are brought into the shape tau2's tools print them in: an order carries its
optional fields (`cancel_reason`, `exchange_*`, `return_*`) as `null` until a tool sets
them, as tau2's order model does.
"""

from __future__ import annotations

import gzip
from functools import cache
from importlib import resources
from typing import Any

import orjson

from trajforge.envs.tau.db import TABLE_SOURCES, Record

ORDER_OPTIONAL = (
    "cancel_reason",
    "exchange_items",
    "exchange_new_items",
    "exchange_payment_method_id",
    "exchange_price_difference",
    "return_items",
    "return_payment_method_id",
)


def _read_gz(domain: str, name: str) -> Any:
    raw = (resources.files("trajforge.envs.tau2") / "data" / domain / name).read_bytes()
    return orjson.loads(gzip.decompress(raw))


def retail_tables() -> dict[str, dict[str, Record]]:
    tables = _read_gz("retail", "db.json.gz")
    for order in tables["orders"].values():
        for field in ORDER_OPTIONAL:
            order.setdefault(field, None)
    return tables


def airline_tables() -> dict[str, dict[str, Record]]:
    return _read_gz("airline", "db.json.gz")


@cache
def domain_tasks(domain: str) -> tuple[dict[str, Any], ...]:
    """The tasks of a tau2 domain as tau2 writes them (`tasks.json`)."""
    return tuple(_read_gz(domain, "tasks.json.gz"))


@cache
def policy_text(domain: str) -> str:
    return (resources.files("trajforge.envs.tau2") / "data" / domain / "policy.md").read_text()


TABLE_SOURCES["tau2-retail"] = retail_tables
TABLE_SOURCES["tau2-airline"] = airline_tables
