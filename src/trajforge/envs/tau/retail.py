"""The retail domain's tools: users, orders and products of an online shop.

Order life cycle: `pending` orders can be cancelled or changed (address, items, payment);
`delivered` orders can be returned or exchanged. A gift card refund or charge changes the
card's `balance` at once; other refunds are only recorded in the order's payment history.
"""

from __future__ import annotations

from typing import Any

from trajforge.envs.tau.db import Record, TauDB
from trajforge.envs.tau.tooling import COMMON_TOOLS, Tool, array, dumps, string
from trajforge.errors import ToolError

CANCEL_REASONS = ("no longer needed", "ordered by mistake")


def _order(db: TauDB, order_id: str) -> Record:
    return db.require("orders", order_id, "order")


def _user(db: TauDB, user_id: str) -> Record:
    return db.require("users", user_id, "user")


def _require_status(order: Record, status: str, what: str) -> None:
    if order["status"] != status:
        raise ToolError(f"non-{status} order cannot be {what}")


def _payment_method(db: TauDB, user_id: str, payment_method_id: str) -> Record:
    methods = _user(db, user_id)["payment_methods"]
    if payment_method_id not in methods:
        raise ToolError("payment method not found")
    return methods[payment_method_id]


def _adjust_gift_card(db: TauDB, user_id: str, payment_method_id: str, delta: float) -> None:
    card = db.edit("users", user_id)["payment_methods"][payment_method_id]
    card["balance"] = round(card["balance"] + delta, 2)


def _check_items_in_order(order: Record, item_ids: list[str]) -> None:
    present = [item["item_id"] for item in order["items"]]
    for item_id in item_ids:
        if item_ids.count(item_id) > present.count(item_id):
            raise ToolError(f"{item_id} not found")


def _price_difference(db: TauDB, order: Record, item_ids: list, new_item_ids: list) -> float:
    """New minus old price over item pairs (not rounded: the recorded runs keep the float
    sum as it comes); checks each new item exists and is available."""
    if len(item_ids) != len(new_item_ids):
        raise ToolError("the number of items to be exchanged should match")
    difference = 0.0
    for item_id, new_item_id in zip(item_ids, new_item_ids, strict=True):
        item = next(i for i in order["items"] if i["item_id"] == item_id)
        variant = _available_variant(db, item["product_id"], new_item_id)
        difference += variant["price"] - item["price"]
    return difference


def _available_variant(db: TauDB, product_id: str, item_id: str) -> Record:
    variants = db.require("products", product_id, f"product {product_id}")["variants"]
    variant = variants.get(item_id)
    if variant is None or not variant["available"]:
        raise ToolError(f"new item {item_id} not found or available")
    return variant


def find_user_id_by_email(db: TauDB, email: str) -> str:
    for user_id, user in db.items("users"):
        if user["email"].lower() == email.lower():
            return user_id
    raise ToolError("user not found")


def find_user_id_by_name_zip(db: TauDB, first_name: str, last_name: str, zip: str) -> str:
    for user_id, user in db.items("users"):
        name = user["name"]
        if (
            name["first_name"].lower() == first_name.lower()
            and name["last_name"].lower() == last_name.lower()
            and user["address"]["zip"] == zip
        ):
            return user_id
    raise ToolError("user not found")


def get_order_details(db: TauDB, order_id: str) -> str:
    return dumps(_order(db, order_id))


def get_product_details(db: TauDB, product_id: str) -> str:
    product = db.get("products", product_id)
    if product is None:
        raise ToolError("product not found")
    return dumps(product)


def get_user_details(db: TauDB, user_id: str) -> str:
    return dumps(_user(db, user_id))


def list_all_product_types(db: TauDB) -> str:
    names = {product["name"]: product_id for product_id, product in db.items("products")}
    return dumps(dict(sorted(names.items())))


def cancel_pending_order(db: TauDB, order_id: str, reason: str) -> str:
    order = _order(db, order_id)
    _require_status(order, "pending", "cancelled")
    if reason not in CANCEL_REASONS:
        raise ToolError("invalid reason")
    refunds = [
        {
            "transaction_type": "refund",
            "amount": payment["amount"],
            "payment_method_id": payment["payment_method_id"],
        }
        for payment in order["payment_history"]
    ]
    for refund in refunds:
        if "gift_card" in refund["payment_method_id"]:
            _adjust_gift_card(db, order["user_id"], refund["payment_method_id"], refund["amount"])
    order = db.edit("orders", order_id)
    order["status"] = "cancelled"
    order["cancel_reason"] = reason
    order["payment_history"].extend(refunds)
    return dumps(order)


def exchange_delivered_order_items(
    db: TauDB, order_id: str, item_ids: list, new_item_ids: list, payment_method_id: str
) -> str:
    order = _order(db, order_id)
    _require_status(order, "delivered", "exchanged")
    _check_items_in_order(order, item_ids)
    difference = round(_price_difference(db, order, item_ids, new_item_ids), 2)
    method = _payment_method(db, order["user_id"], payment_method_id)
    if method["source"] == "gift_card" and method["balance"] < difference:
        raise ToolError("insufficient gift card balance to pay for the price difference")
    order = db.edit("orders", order_id)
    order["status"] = "exchange requested"
    order["exchange_items"] = sorted(item_ids)
    order["exchange_new_items"] = sorted(new_item_ids)
    order["exchange_payment_method_id"] = payment_method_id
    order["exchange_price_difference"] = difference
    return dumps(order)


def _address(address1, address2, city, state, country, zip) -> dict[str, Any]:
    return {
        "address1": address1,
        "address2": address2,
        "city": city,
        "state": state,
        "country": country,
        "zip": zip,
    }


def modify_pending_order_address(
    db: TauDB, order_id: str, address1, address2, city, state, country, zip
) -> str:
    _require_status(_order(db, order_id), "pending", "modified")
    order = db.edit("orders", order_id)
    order["address"] = _address(address1, address2, city, state, country, zip)
    return dumps(order)


def modify_user_address(db: TauDB, user_id: str, address1, address2, city, state, country, zip):
    _user(db, user_id)
    user = db.edit("users", user_id)
    user["address"] = _address(address1, address2, city, state, country, zip)
    return dumps(user)


def modify_pending_order_items(
    db: TauDB, order_id: str, item_ids: list, new_item_ids: list, payment_method_id: str
) -> str:
    order = _order(db, order_id)
    _require_status(order, "pending", "modified")
    _check_items_in_order(order, item_ids)
    difference = _price_difference(db, order, item_ids, new_item_ids)
    method = _payment_method(db, order["user_id"], payment_method_id)
    if method["source"] == "gift_card" and method["balance"] < difference:
        raise ToolError("insufficient gift card balance to pay for the new item")
    if method["source"] == "gift_card":
        _adjust_gift_card(db, order["user_id"], payment_method_id, -difference)
    order = db.edit("orders", order_id)
    order["payment_history"].append(
        {
            "transaction_type": "payment" if difference > 0 else "refund",
            "amount": abs(difference),
            "payment_method_id": payment_method_id,
        }
    )
    for item_id, new_item_id in zip(item_ids, new_item_ids, strict=True):
        item = next(i for i in order["items"] if i["item_id"] == item_id)
        product = db.require("products", item["product_id"], f"product {item['product_id']}")
        variant = product["variants"][new_item_id]
        item["item_id"] = new_item_id
        item["price"] = variant["price"]
        item["options"] = variant["options"]
    order["status"] = "pending (item modified)"
    return dumps(order)


def modify_pending_order_payment(db: TauDB, order_id: str, payment_method_id: str) -> str:
    order = _order(db, order_id)
    _require_status(order, "pending", "modified")
    method = _payment_method(db, order["user_id"], payment_method_id)
    history = order["payment_history"]
    if len(history) > 1 or history[0]["transaction_type"] != "payment":
        raise ToolError("there should be exactly one payment for a pending order")
    old_method_id = history[0]["payment_method_id"]
    if old_method_id == payment_method_id:
        raise ToolError("the new payment method should be different from the current one")
    amount = history[0]["amount"]
    if method["source"] == "gift_card" and method["balance"] < amount:
        raise ToolError("insufficient gift card balance to pay for the order")
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
        _adjust_gift_card(db, order["user_id"], payment_method_id, -amount)
    if "gift_card" in old_method_id:
        _adjust_gift_card(db, order["user_id"], old_method_id, amount)
    return dumps(order)


def return_delivered_order_items(
    db: TauDB, order_id: str, item_ids: list, payment_method_id: str
) -> str:
    order = _order(db, order_id)
    _require_status(order, "delivered", "returned")
    original = order["payment_history"][0]["payment_method_id"]
    if "gift_card" not in payment_method_id and payment_method_id != original:
        raise ToolError(
            "payment method should be either the original payment method or a gift card"
        )
    _payment_method(db, order["user_id"], payment_method_id)
    _check_items_in_order(order, item_ids)
    order = db.edit("orders", order_id)
    order["status"] = "return requested"
    order["return_items"] = sorted(item_ids)
    order["return_payment_method_id"] = payment_method_id
    return dumps(order)


_ORDER_ID = string("The order id, with its '#' prefix, e.g. '#W0000000'.")
_ITEM_IDS = array("Item ids of the order's items.", {"type": "string"})
_PAYMENT = string("A payment method id of the user, e.g. 'gift_card_0000000'.")
_ADDRESS = {
    "address1": string("First address line."),
    "address2": string("Second address line (may be empty)."),
    "city": string("City."),
    "state": string("State, e.g. 'CA'."),
    "country": string("Country, e.g. 'USA'."),
    "zip": string("Five-digit zip code."),
}

RETAIL_TOOLS: list[Tool] = [
    Tool(
        "find_user_id_by_email",
        "Find a user id from an email address.",
        find_user_id_by_email,
        {"email": string("The email address.")},
    ),
    Tool(
        "find_user_id_by_name_zip",
        "Find a user id from first name, last name and zip code.",
        find_user_id_by_name_zip,
        {
            "first_name": string("First name."),
            "last_name": string("Last name."),
            "zip": string("Zip code."),
        },
    ),
    Tool(
        "get_user_details",
        "The user's profile: name, address, email, payment methods, orders.",
        get_user_details,
        {"user_id": string("The user id, e.g. 'sara_doe_496'.")},
    ),
    Tool(
        "get_order_details",
        "Status, items, address, fulfillments and payments of an order.",
        get_order_details,
        {"order_id": _ORDER_ID},
    ),
    Tool(
        "get_product_details",
        "A product and all its variants (item ids, options, availability, price).",
        get_product_details,
        {"product_id": string("The product id (not an item id).")},
    ),
    Tool(
        "list_all_product_types",
        "All product types with their product ids.",
        list_all_product_types,
    ),
    Tool(
        "cancel_pending_order",
        "Cancel a pending order. Gift card payments are refunded at once; others in 5 to 7 "
        "business days. Confirm with the user first.",
        cancel_pending_order,
        {"order_id": _ORDER_ID, "reason": string("Why.", enum=list(CANCEL_REASONS))},
        writes=True,
    ),
    Tool(
        "modify_pending_order_address",
        "Change the shipping address of a pending order. Confirm with the user first.",
        modify_pending_order_address,
        {"order_id": _ORDER_ID, **_ADDRESS},
        writes=True,
    ),
    Tool(
        "modify_pending_order_items",
        "Swap items of a pending order for other variants of the same products; can be done "
        "once per order. The price difference is charged or refunded with the given payment "
        "method. Confirm with the user first.",
        modify_pending_order_items,
        {
            "order_id": _ORDER_ID,
            "item_ids": _ITEM_IDS,
            "new_item_ids": array("The new item ids, one per item id.", {"type": "string"}),
            "payment_method_id": _PAYMENT,
        },
        writes=True,
    ),
    Tool(
        "modify_pending_order_payment",
        "Pay a pending order with another payment method of the user. Confirm first.",
        modify_pending_order_payment,
        {"order_id": _ORDER_ID, "payment_method_id": _PAYMENT},
        writes=True,
    ),
    Tool(
        "modify_user_address",
        "Change the default address of a user. Confirm with the user first.",
        modify_user_address,
        {"user_id": string("The user id."), **_ADDRESS},
        writes=True,
    ),
    Tool(
        "return_delivered_order_items",
        "Request the return of items of a delivered order; the refund goes to the original "
        "payment method or a gift card. Confirm with the user first.",
        return_delivered_order_items,
        {"order_id": _ORDER_ID, "item_ids": _ITEM_IDS, "payment_method_id": _PAYMENT},
        writes=True,
    ),
    Tool(
        "exchange_delivered_order_items",
        "Request the exchange of items of a delivered order for other variants of the same "
        "products; can be done once per order. Confirm with the user first.",
        exchange_delivered_order_items,
        {
            "order_id": _ORDER_ID,
            "item_ids": _ITEM_IDS,
            "new_item_ids": array("The new item ids, one per item id.", {"type": "string"}),
            "payment_method_id": _PAYMENT,
        },
        writes=True,
    ),
    *COMMON_TOOLS,
]
