"""Effects of the tau write tools on the database (beyond what replay compares: outputs)."""

from __future__ import annotations

import json

import pytest

from trajforge.envs.tau import TauAirlineEnv, TauRetailEnv
from trajforge.schema import Task, ToolCall


@pytest.fixture
def retail() -> TauRetailEnv:
    env = TauRetailEnv()
    env.reset(Task(id="t", environment="tau-retail", gold={"actions": [], "outputs": []}))
    return env


@pytest.fixture
def airline() -> TauAirlineEnv:
    env = TauAirlineEnv()
    env.reset(Task(id="t", environment="tau-airline", gold={"actions": [], "outputs": []}))
    return env


def call(env, name: str, **kwargs) -> str:
    return env.step(ToolCall(id="c", name=name, arguments=json.dumps(kwargs))).content


def test_cancelling_a_gift_card_order_refunds_the_card_at_once(retail: TauRetailEnv) -> None:
    order = json.loads(
        call(retail, "cancel_pending_order", order_id="#W6436609", reason="no longer needed")
    )
    assert order["status"] == "cancelled" and order["cancel_reason"] == "no longer needed"
    assert order["payment_history"][-1] == {
        "transaction_type": "refund",
        "amount": 3005.33,
        "payment_method_id": "gift_card_4374071",
    }
    user = json.loads(call(retail, "get_user_details", user_id="anya_garcia_3271"))
    assert user["payment_methods"]["gift_card_4374071"]["balance"] == round(51 + 3005.33, 2)
    again = call(retail, "cancel_pending_order", order_id="#W6436609", reason="no longer needed")
    assert again == "Error: non-pending order cannot be cancelled"


def test_paying_a_pending_order_differently_moves_the_money(retail: TauRetailEnv) -> None:
    order = json.loads(
        call(
            retail,
            "modify_pending_order_payment",
            order_id="#W6436609",
            payment_method_id="credit_card_8955149",
        )
    )
    assert [p["transaction_type"] for p in order["payment_history"]] == [
        "payment",
        "payment",
        "refund",
    ]
    user = json.loads(call(retail, "get_user_details", user_id="anya_garcia_3271"))
    assert user["payment_methods"]["gift_card_4374071"]["balance"] == round(51 + 3005.33, 2)
    twice = call(
        retail,
        "modify_pending_order_payment",
        order_id="#W6436609",
        payment_method_id="gift_card_4374071",
    )
    assert twice == "Error: there should be exactly one payment for a pending order"


def test_invalid_cancel_reason_and_unknown_order(retail: TauRetailEnv) -> None:
    assert call(retail, "cancel_pending_order", order_id="#W6436609", reason="meh") == (
        "Error: invalid reason"
    )
    assert call(retail, "get_order_details", order_id="#W0") == "Error: order not found"
    assert retail.db.changes() == {}


def test_booking_spends_certificates_whole_and_debits_gift_cards(airline: TauAirlineEnv) -> None:
    flights = json.loads(
        call(airline, "search_direct_flight", origin="JFK", destination="SEA", date="2024-05-20")
    )
    flight = flights[0]
    price = flight["prices"]["economy"]
    total = price + 50  # one paid bag
    payments = [{"payment_id": "certificate_7502997", "amount": min(250, total)}]
    if total > 250:
        payments.append({"payment_id": "credit_card_2140654", "amount": total - 250})
    booked = json.loads(
        call(
            airline,
            "book_reservation",
            user_id="mei_hernandez_8984",
            origin="JFK",
            destination="SEA",
            flight_type="one_way",
            cabin="economy",
            flights=[{"flight_number": flight["flight_number"], "date": "2024-05-20"}],
            passengers=[{"first_name": "Mei", "last_name": "Hernandez", "dob": "1990-01-01"}],
            payment_methods=payments,
            total_baggages=1,
            nonfree_baggages=1,
            insurance="no",
        )
    )
    assert booked["reservation_id"] == "HATHAT" and booked["flights"][0]["price"] == price
    user = json.loads(call(airline, "get_user_details", user_id="mei_hernandez_8984"))
    assert "certificate_7502997" not in user["payment_methods"]
    assert user["reservations"][-1] == "HATHAT"
    bags = json.loads(
        call(
            airline,
            "update_reservation_baggages",
            reservation_id="HATHAT",
            total_baggages=3,
            nonfree_baggages=2,
            payment_id="gift_card_5309492",
        )
    )
    assert bags["payment_history"][-1] == {"payment_id": "gift_card_5309492", "amount": 50}
    user = json.loads(call(airline, "get_user_details", user_id="mei_hernandez_8984"))
    assert user["payment_methods"]["gift_card_5309492"]["amount"] == 98 - 50


def test_certificates_and_cancellations(airline: TauAirlineEnv) -> None:
    sent = call(airline, "send_certificate", user_id="mei_hernandez_8984", amount=100)
    assert (
        sent == "Certificate certificate_3221322 added to user mei_hernandez_8984 with amount 100."
    )
    cancelled = json.loads(call(airline, "cancel_reservation", reservation_id="R9QDGB"))
    assert cancelled["status"] == "cancelled"
    paid = [p for p in cancelled["payment_history"] if p["amount"] > 0]
    refunds = [p for p in cancelled["payment_history"] if p["amount"] < 0]
    assert [-r["amount"] for r in refunds] == [p["amount"] for p in paid]
    wrong = call(airline, "update_reservation_passengers", reservation_id="R9QDGB", passengers=[])
    assert wrong == "Error: number of passengers does not match"
