"""tau2's retail tools: tau-bench's shop with tau2's checks, messages and output shapes.

The reads and `cancel_pending_order` behave as tau-bench's (see
`envs/tau/retail.py`, reused here with tau2's capitalised error messages). tau2 changed
the other writes; the differences the recorded tau2 runs depend on:

- address and payment changes accept any order whose status contains `pending` (an order
  whose items were modified can still change address or payment);
- `modify_pending_order_items` refuses an unchanged item id, and gives every modified item
  the price and options of the *last* new variant of the call (as tau2 does);
- addresses are written with `country` before `state`;
- returns and exchanges check the payment method before the items, with tau2's messages.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from trajforge.envs.tau import retail as tau
from trajforge.envs.tau.db import Record, TauDB
from trajforge.envs.tau.tooling import COMMON_TOOLS, Tool, dumps
from trajforge.errors import ToolError

P = ParamSpec("P")
R = TypeVar("R")


def capitalised(fn: Callable[P, R]) -> Callable[P, R]:
    """A tau-bench tool whose error messages start with a capital letter, as tau2's do."""

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except ToolError as exc:
            text = str(exc)
            raise ToolError(text[:1].upper() + text[1:]) from exc

    return call


def _order(db: TauDB, order_id: str) -> Record:
    return db.require("orders", order_id, "Order")


def _payment_method(db: TauDB, user_id: str, payment_method_id: str) -> Record:
    user = db.require("users", user_id, "User")
    method = user["payment_methods"].get(payment_method_id)
    if method is None:
        raise ToolError("Payment method not found")
    return method


def _variant(db: TauDB, product_id: str, item_id: str) -> Record:
    product = db.require("products", product_id, "Product")
    variant = product["variants"].get(item_id)
    if variant is None:
        raise ToolError("Variant not found")
    return variant


def _new_variants(db: TauDB, order: Record, item_ids: list, new_item_ids: list, *, same_ok: bool):
    """(price difference, the last new variant) over item pairs; checks each new item."""
    difference = 0.0
    variant: Record | None = None
    for item_id, new_item_id in zip(item_ids, new_item_ids, strict=False):
        if not same_ok and item_id == new_item_id:
            raise ToolError("The new item id should be different from the old item id")
        item = next((i for i in order["items"] if i["item_id"] == item_id), None)
        if item is None:
            raise ToolError(f"Item {item_id} not found")
        variant = _variant(db, item["product_id"], new_item_id)
        if not variant["available"]:
            raise ToolError(f"New item {new_item_id} not found or available")
        difference += variant["price"] - item["price"]
    return difference, variant


def _count_items(order: Record, item_ids: list, message: Callable[[str], str]) -> None:
    present = [item["item_id"] for item in order["items"]]
    for item_id in item_ids:
        if item_ids.count(item_id) > present.count(item_id):
            raise ToolError(message(item_id))


def _set_gift_card(db: TauDB, user_id: str, method_id: str, delta: float) -> None:
    card = db.edit("users", user_id)["payment_methods"][method_id]
    card["balance"] = round(card["balance"] + delta, 2)


def _address(address1, address2, city, state, country, zip) -> Record:
    """An address in tau2's field order (country before state)."""
    return {
        "address1": address1,
        "address2": address2,
        "city": city,
        "country": country,
        "state": state,
        "zip": zip,
    }


def modify_user_address(db: TauDB, user_id: str, address1, address2, city, state, country, zip):
    db.require("users", user_id, "User")
    user = db.edit("users", user_id)
    user["address"] = _address(address1, address2, city, state, country, zip)
    return dumps(user)


def exchange_delivered_order_items(
    db: TauDB, order_id: str, item_ids: list, new_item_ids: list, payment_method_id: str
) -> str:
    order = _order(db, order_id)
    if order["status"] != "delivered":
        raise ToolError("Non-delivered order cannot be exchanged")
    _count_items(order, item_ids, lambda item_id: f"Number of {item_id} not found.")
    if len(item_ids) != len(new_item_ids):
        raise ToolError("The number of items to be exchanged should match.")
    difference, _ = _new_variants(db, order, item_ids, new_item_ids, same_ok=True)
    difference = round(difference, 2)
    method = _payment_method(db, order["user_id"], payment_method_id)
    if method["source"] == "gift_card" and method["balance"] < difference:
        raise ToolError("Insufficient gift card balance to pay for the price difference")
    order = db.edit("orders", order_id)
    order["status"] = "exchange requested"
    order["exchange_items"] = sorted(item_ids)
    order["exchange_new_items"] = sorted(new_item_ids)
    order["exchange_payment_method_id"] = payment_method_id
    order["exchange_price_difference"] = difference
    return dumps(order)


def modify_pending_order_address(
    db: TauDB, order_id: str, address1, address2, city, state, country, zip
) -> str:
    if "pending" not in _order(db, order_id)["status"]:
        raise ToolError("Non-pending order cannot be modified")
    order = db.edit("orders", order_id)
    order["address"] = _address(address1, address2, city, state, country, zip)
    return dumps(order)


def modify_pending_order_items(
    db: TauDB, order_id: str, item_ids: list, new_item_ids: list, payment_method_id: str
) -> str:
    order = _order(db, order_id)
    if order["status"] != "pending":
        raise ToolError("Non-pending order cannot be modified")
    _count_items(order, item_ids, lambda item_id: f"{item_id} not found")
    if len(item_ids) != len(new_item_ids):
        raise ToolError("The number of items to be exchanged should match")
    difference, last = _new_variants(db, order, item_ids, new_item_ids, same_ok=False)
    method = _payment_method(db, order["user_id"], payment_method_id)
    if method["source"] == "gift_card" and method["balance"] < difference:
        raise ToolError("Insufficient gift card balance to pay for the new item")
    order = db.edit("orders", order_id)
    order["payment_history"].append(
        {
            "transaction_type": "payment" if difference > 0 else "refund",
            "amount": abs(difference),
            "payment_method_id": payment_method_id,
        }
    )
    if method["source"] == "gift_card":
        _set_gift_card(db, order["user_id"], payment_method_id, -difference)
    for item_id, new_item_id in zip(item_ids, new_item_ids, strict=False):
        item = next(i for i in order["items"] if i["item_id"] == item_id)
        item["item_id"] = new_item_id
        item["price"] = last["price"]  # tau2 prices every modified item as the last variant
        item["options"] = last["options"]
    order["status"] = "pending (item modified)"
    return dumps(order)


def modify_pending_order_payment(db: TauDB, order_id: str, payment_method_id: str) -> str:
    order = _order(db, order_id)
    if "pending" not in order["status"]:
        raise ToolError("Non-pending order cannot be modified")
    method = _payment_method(db, order["user_id"], payment_method_id)
    history = order["payment_history"]
    if len(history) != 1 or history[0]["transaction_type"] != "payment":
        raise ToolError("There should be exactly one payment for a pending order")
    old_method_id = history[0]["payment_method_id"]
    if old_method_id == payment_method_id:
        raise ToolError("The new payment method should be different from the current one")
    amount = history[0]["amount"]
    if method["source"] == "gift_card" and method["balance"] < amount:
        raise ToolError("Insufficient gift card balance to pay for the order")
    order = db.edit("orders", order_id)
    order["payment_history"].extend(
        [
            {
                "transaction_type": "payment",
                "amount": amount,
                "payment_method_id": payment_method_id,
            },
            {"transaction_type": "refund", "amount": amount, "payment_method_id": old_method_id},
        ]
    )
    if method["source"] == "gift_card":
        _set_gift_card(db, order["user_id"], payment_method_id, -amount)
    if _payment_method(db, order["user_id"], old_method_id)["source"] == "gift_card":
        _set_gift_card(db, order["user_id"], old_method_id, amount)
    return dumps(order)


def return_delivered_order_items(
    db: TauDB, order_id: str, item_ids: list, payment_method_id: str
) -> str:
    order = _order(db, order_id)
    if order["status"] != "delivered":
        raise ToolError("Non-delivered order cannot be returned")
    method = _payment_method(db, order["user_id"], payment_method_id)
    original = order["payment_history"][0]["payment_method_id"]
    if method["source"] != "gift_card" and payment_method_id != original:
        raise ToolError("Payment method should be the original payment method")
    _count_items(order, item_ids, lambda item_id: "Some item not found")
    order = db.edit("orders", order_id)
    order["status"] = "return requested"
    order["return_items"] = sorted(item_ids)
    order["return_payment_method_id"] = payment_method_id
    return dumps(order)


_TAU = {tool.name: tool for tool in tau.RETAIL_TOOLS}
_REUSED = (
    "find_user_id_by_email",
    "find_user_id_by_name_zip",
    "get_user_details",
    "get_order_details",
    "get_product_details",
    "list_all_product_types",
    "cancel_pending_order",
)
_CHANGED = {
    fn.__name__: fn
    for fn in (
        exchange_delivered_order_items,
        modify_pending_order_address,
        modify_pending_order_items,
        modify_pending_order_payment,
        modify_user_address,
        return_delivered_order_items,
    )
}


def _tool(name: str) -> Tool:
    base = _TAU[name]
    fn = _CHANGED.get(name) or capitalised(base.fn)
    return Tool(base.name, base.description, fn, base.properties, base.writes, base.ends_episode)


TAU2_RETAIL_TOOLS: list[Tool] = [
    *(
        _tool(tool.name)
        for tool in tau.RETAIL_TOOLS
        if tool.name in _REUSED or tool.name in _CHANGED
    ),
    *(
        Tool(t.name, t.description, capitalised(t.fn), t.properties, t.writes, t.ends_episode)
        for t in COMMON_TOOLS
        if t.name != "think"
    ),
]
"""tau2's retail tools, in tau-bench's order (tau2 has no `think` tool)."""
