"""Plausible wrong actions for synthetic failures (used by the noisy expert).

A distractor touches the task's own user: it reads the wrong record, or makes a write the
task did not ask for (cancel another order, change the address, send a certificate...).
Calls equal to a gold action are never offered.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import orjson

from trajforge.envs.tau.db import TauDB
from trajforge.schema import Task, ToolCall

WRITE_SHARE = 0.6
"""Share of distractors that are writes (the rest are harmless reads)."""

Candidate = tuple[str, dict]
WRONG_ADDRESS = {
    "address1": "1 Wrong Way",
    "address2": "",
    "city": "Nowhere",
    "state": "KS",
    "country": "USA",
    "zip": "66002",
}


def distractor_call(domain: str, db: TauDB, task: Task, rng: random.Random) -> ToolCall | None:
    user_id = str(task.data.get("user_id") or "")
    user = db.get("users", user_id)
    if user is None:
        return None
    makers = _MAKERS[domain]
    writes = rng.random() < WRITE_SHARE
    candidates = (makers[1] if writes else makers[0])(db, user_id, user)
    gold = {
        (a["name"], _canon(a.get("kwargs") or {})) for a in (task.gold or {}).get("actions", [])
    }
    candidates = [(n, k) for n, k in candidates if (n, _canon(k)) not in gold]
    if not candidates:
        return None
    name, kwargs = rng.choice(candidates)
    return ToolCall(id="distractor", name=name, arguments=orjson.dumps(kwargs).decode())


def _canon(kwargs: dict) -> str:
    return orjson.dumps(kwargs, option=orjson.OPT_SORT_KEYS).decode()


def _retail_reads(db: TauDB, user_id: str, user: dict) -> list[Candidate]:
    reads: list[Candidate] = [("get_user_details", {"user_id": user_id})]
    reads += [("get_order_details", {"order_id": o}) for o in user["orders"]]
    return reads


def _retail_writes(db: TauDB, user_id: str, user: dict) -> list[Candidate]:
    writes: list[Candidate] = [("modify_user_address", {"user_id": user_id, **WRONG_ADDRESS})]
    for order_id in user["orders"]:
        order = db.get("orders", order_id)
        if order is None:
            continue
        if order["status"] == "pending":
            writes.append(
                ("cancel_pending_order", {"order_id": order_id, "reason": "no longer needed"})
            )
        elif order["status"] == "delivered":
            method = order["payment_history"][0]["payment_method_id"]
            item = order["items"][0]["item_id"]
            writes.append(
                (
                    "return_delivered_order_items",
                    {"order_id": order_id, "item_ids": [item], "payment_method_id": method},
                )
            )
    return writes


def _airline_reads(db: TauDB, user_id: str, user: dict) -> list[Candidate]:
    reads: list[Candidate] = [("get_user_details", {"user_id": user_id})]
    reads += [("get_reservation_details", {"reservation_id": r}) for r in user["reservations"]]
    return reads


def _airline_writes(db: TauDB, user_id: str, user: dict) -> list[Candidate]:
    writes: list[Candidate] = [("send_certificate", {"user_id": user_id, "amount": 100})]
    cards = [m for m, v in user["payment_methods"].items() if v["source"] == "credit_card"]
    for reservation_id in user["reservations"]:
        reservation = db.get("reservations", reservation_id)
        if reservation is None or reservation.get("status") == "cancelled":
            continue
        writes.append(("cancel_reservation", {"reservation_id": reservation_id}))
        if cards:
            bags = {
                "reservation_id": reservation_id,
                "total_baggages": reservation["total_baggages"] + 1,
                "nonfree_baggages": reservation["nonfree_baggages"] + 1,
                "payment_id": cards[0],
            }
            writes.append(("update_reservation_baggages", bags))
    return writes


Maker = Callable[[TauDB, str, dict], list[Candidate]]
_MAKERS: dict[str, tuple[Maker, Maker]] = {
    "retail": (_retail_reads, _retail_writes),
    "airline": (_airline_reads, _airline_writes),
}
