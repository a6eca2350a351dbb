"""tau2's airline tools over the airline tables in tau2's layout.

Written for tau2's behaviour, which differs from tau-bench's in ways the recorded runs
show: booking takes the seats it sells from the flight's availability; a flight change
also changes the reservation's cabin; one-stop search lists the second leg with its own
date's seats and prices, keeps only second legs leaving no earlier than the first lands
(a text comparison of the times, as tau2 makes it), and writes the next day as
`2024-05-<day+1>` without zero padding; records are printed with every field of tau2's
models (a new reservation's `status` is `null`, search results carry a `date`).
"""

from __future__ import annotations

import copy
from typing import Any

from trajforge.envs.tau import airline as tau
from trajforge.envs.tau.airline import AIRLINE_TOOLS as TAU_AIRLINE_TOOLS
from trajforge.envs.tau.airline import AIRPORTS, BOOKING_TIME, NEW_RESERVATION_IDS
from trajforge.envs.tau.db import Record, TauDB
from trajforge.envs.tau.tooling import Tool, dumps
from trajforge.envs.tau2.retail import capitalised
from trajforge.errors import ToolError

NEW_CERTIFICATE_IDS = ("certificate_3221322", "certificate_3221323", "certificate_3221324")


def _user(db: TauDB, user_id: str) -> Record:
    user = db.get("users", user_id)
    if user is None:
        raise ToolError(f"User {user_id} not found")
    return user


def _reservation(db: TauDB, reservation_id: str) -> Record:
    reservation = db.get("reservations", reservation_id)
    if reservation is None:
        raise ToolError(f"Reservation {reservation_id} not found")
    return reservation


def _flight(db: TauDB, flight_number: str) -> Record:
    flight = db.get("flights", flight_number)
    if flight is None:
        raise ToolError(f"Flight {flight_number} not found")
    return flight


def _on_date(db: TauDB, flight_number: str, date: str) -> Record:
    flight = _flight(db, flight_number)
    if date not in flight["dates"]:
        raise ToolError(f"Flight {flight_number} not found on date {date}")
    return flight["dates"][date]


def _bookable(db: TauDB, flight_number: str, date: str, cabin: str, seats: int) -> Record:
    on_date = _on_date(db, flight_number, date)
    if on_date["status"] != "available":
        raise ToolError(f"Flight {flight_number} not available on date {date}")
    if on_date["available_seats"][cabin] < seats:
        raise ToolError(f"Not enough seats on flight {flight_number}")
    return on_date


def _segment(db: TauDB, flight_number: str, date: str, price: Any) -> Record:
    flight = _flight(db, flight_number)
    return {
        "flight_number": flight_number,
        "origin": flight["origin"],
        "destination": flight["destination"],
        "date": date,
        "price": price,
    }


def _passenger(passenger: dict[str, Any]) -> Record:
    return {key: passenger[key] for key in ("first_name", "last_name", "dob")}


def _payment(payment: dict[str, Any]) -> Record:
    return {"payment_id": payment["payment_id"], "amount": payment["amount"]}


def get_user_details(db: TauDB, user_id: str) -> str:
    return dumps(_user(db, user_id))


def get_reservation_details(db: TauDB, reservation_id: str) -> str:
    return dumps(_reservation(db, reservation_id))


def list_all_airports(db: TauDB) -> str:
    return dumps([{"iata": code, "city": city} for code, city in AIRPORTS.items()])


def get_flight_status(db: TauDB, flight_number: str, date: str) -> str:
    return _on_date(db, flight_number, date)["status"]


def _direct(
    db: TauDB, date: str, origin: str | None, destination: str | None, leave_after: str | None
) -> list[Record]:
    found = []
    for _, flight in db.items("flights"):
        on_date = flight["dates"].get(date)
        if (
            (origin is None or flight["origin"] == origin)
            and (destination is None or flight["destination"] == destination)
            and on_date is not None
            and on_date["status"] == "available"
            and (leave_after is None or flight["scheduled_departure_time_est"] >= leave_after)
        ):
            found.append(_listing(flight, on_date, None))
    return found


def _listing(flight: Record, on_date: Record, date: str | None) -> Record:
    return {
        "flight_number": flight["flight_number"],
        "origin": flight["origin"],
        "destination": flight["destination"],
        "status": "available",
        "scheduled_departure_time_est": flight["scheduled_departure_time_est"],
        "scheduled_arrival_time_est": flight["scheduled_arrival_time_est"],
        "date": date,
        "available_seats": on_date["available_seats"],
        "prices": on_date["prices"],
    }


def search_direct_flight(db: TauDB, origin: str, destination: str, date: str) -> str:
    return dumps(_direct(db, date, origin, destination, None))


def search_onestop_flight(db: TauDB, origin: str, destination: str, date: str) -> str:
    found = []
    for first in _direct(db, date, origin, None, None):
        first["date"] = date
        arrival = first["scheduled_arrival_time_est"]
        second_date = f"2024-05-{int(date[-2:]) + 1}" if "+1" in arrival else date
        for second in _direct(db, second_date, first["destination"], destination, arrival):
            second["date"] = second_date
            found.append([first, second])
    return dumps(found)


def _check_update_payment(user: Record, payment_id: str, amount: Any) -> Record:
    method = user["payment_methods"].get(payment_id)
    if method is None:
        raise ToolError("Payment method not found")
    if method["source"] == "certificate":
        raise ToolError("Certificate cannot be used to update reservation")
    if method["source"] == "gift_card" and method["amount"] < amount:
        raise ToolError("Gift card balance is not enough")
    return method


def _pay_update(db: TauDB, reservation_id: str, user_id: str, payment_id: str, amount) -> None:
    """Debit a gift card and record the payment (none when the amount is 0)."""
    method = db.edit("users", user_id)["payment_methods"][payment_id]
    if method["source"] == "gift_card":
        method["amount"] -= amount
    if amount != 0:
        payment = {"payment_id": payment_id, "amount": amount}
        db.edit("reservations", reservation_id)["payment_history"].append(payment)


def book_reservation(
    db: TauDB,
    user_id: str,
    origin: str,
    destination: str,
    flight_type: str,
    cabin: str,
    flights: list,
    passengers: list,
    payment_methods: list,
    total_baggages: int,
    nonfree_baggages: int,
    insurance: str,
) -> str:
    passengers = [_passenger(p) for p in passengers]
    payments = [_payment(p) for p in payment_methods]
    user = _user(db, user_id)
    reservation_id = next((r for r in NEW_RESERVATION_IDS if not db.has("reservations", r)), None)
    if reservation_id is None:
        raise ToolError("Too many reservations")
    segments, total = [], 0
    for wanted in flights:
        number, date = wanted["flight_number"], wanted["date"]
        _flight(db, number)
        on_date = _bookable(db, number, date, cabin, len(passengers))
        segments.append(_segment(db, number, date, on_date["prices"][cabin]))
        total += on_date["prices"][cabin] * len(passengers)
    if insurance == "yes":
        total += 30 * len(passengers)
    total += 50 * nonfree_baggages
    capitalised(tau._check_booking_payment)(user, payments, total)
    for payment in payments:
        tau._spend_on_booking(db, user_id, payment)
    for segment in segments:
        seats = db.edit("flights", segment["flight_number"])["dates"][segment["date"]]
        seats["available_seats"][cabin] -= len(passengers)
    reservation = {
        "reservation_id": reservation_id,
        "user_id": user_id,
        "origin": origin,
        "destination": destination,
        "flight_type": flight_type,
        "cabin": cabin,
        "flights": segments,
        "passengers": passengers,
        "payment_history": payments,
        "created_at": BOOKING_TIME,
        "total_baggages": total_baggages,
        "nonfree_baggages": nonfree_baggages,
        "insurance": insurance,
        "status": None,
    }
    db.insert("reservations", reservation_id, reservation)
    db.edit("users", user_id)["reservations"].append(reservation_id)
    return dumps(reservation)


def cancel_reservation(db: TauDB, reservation_id: str) -> str:
    _reservation(db, reservation_id)  # tau2's message for an unknown reservation
    return tau.cancel_reservation(db, reservation_id)


def send_certificate(db: TauDB, user_id: str, amount: int | float) -> str:
    user = _user(db, user_id)
    free = [c for c in NEW_CERTIFICATE_IDS if c not in user["payment_methods"]]
    if not free:
        raise ToolError("Too many certificates")
    certificate = {"source": "certificate", "id": free[0], "amount": float(amount)}
    db.edit("users", user_id)["payment_methods"][free[0]] = certificate
    return f"Certificate {free[0]} added to user {user_id} with amount {amount}."


def update_reservation_baggages(
    db: TauDB, reservation_id: str, total_baggages: int, nonfree_baggages: int, payment_id: str
) -> str:
    reservation = _reservation(db, reservation_id)
    user = _user(db, reservation["user_id"])
    cost = 50 * max(0, nonfree_baggages - reservation["nonfree_baggages"])
    _check_update_payment(user, payment_id, cost)
    _pay_update(db, reservation_id, reservation["user_id"], payment_id, cost)
    reservation = db.edit("reservations", reservation_id)
    reservation["total_baggages"] = total_baggages
    reservation["nonfree_baggages"] = nonfree_baggages
    return dumps(reservation)


def _new_itinerary(db: TauDB, reservation: Record, cabin: str, flights: list) -> list[Record]:
    seats = len(reservation["passengers"])
    segments = []
    for wanted in flights:
        number, date = wanted["flight_number"], wanted["date"]
        _flight(db, number)
        kept = next(
            (
                old
                for old in reservation["flights"]
                if old["flight_number"] == number
                and old["date"] == date
                and cabin == reservation["cabin"]
            ),
            None,
        )
        if kept is not None:
            segments.append(copy.deepcopy(kept))
            continue
        on_date = _bookable(db, number, date, cabin, seats)
        segments.append(_segment(db, number, date, on_date["prices"][cabin]))
    return segments


def update_reservation_flights(
    db: TauDB, reservation_id: str, cabin: str, flights: list, payment_id: str
) -> str:
    reservation = _reservation(db, reservation_id)
    user = _user(db, reservation["user_id"])
    segments = _new_itinerary(db, reservation, cabin, flights)
    seats = len(reservation["passengers"])
    difference = sum(s["price"] for s in segments) * seats
    difference -= sum(old["price"] for old in reservation["flights"]) * seats
    _check_update_payment(user, payment_id, difference)
    _pay_update(db, reservation_id, reservation["user_id"], payment_id, difference)
    reservation = db.edit("reservations", reservation_id)
    reservation["flights"] = segments
    reservation["cabin"] = cabin
    return dumps(reservation)


def update_reservation_passengers(db: TauDB, reservation_id: str, passengers: list) -> str:
    passengers = [_passenger(p) for p in passengers]
    reservation = _reservation(db, reservation_id)
    if len(passengers) != len(reservation["passengers"]):
        raise ToolError("Number of passengers does not match")
    db.edit("reservations", reservation_id)["passengers"] = passengers
    return dumps(db.get("reservations", reservation_id))


_FUNCTIONS = {
    fn.__name__: fn
    for fn in (
        get_user_details,
        get_reservation_details,
        list_all_airports,
        search_direct_flight,
        search_onestop_flight,
        book_reservation,
        cancel_reservation,
        update_reservation_flights,
        update_reservation_baggages,
        update_reservation_passengers,
        send_certificate,
    )
}
_FLIGHT_STATUS = Tool(
    "get_flight_status",
    "The status of a flight on a date (available, delayed, on time, flying, landed, cancelled).",
    get_flight_status,
    {
        "flight_number": {"type": "string", "description": "Flight number, e.g. 'HAT001'."},
        "date": {"type": "string", "description": "Date of the flight, 'YYYY-MM-DD'."},
    },
)


def _tau2(tool: Tool) -> Tool:
    fn = _FUNCTIONS.get(tool.name) or capitalised(tool.fn)
    return Tool(tool.name, tool.description, fn, tool.properties, tool.writes, tool.ends_episode)


TAU2_AIRLINE_TOOLS: list[Tool] = [
    *(_tau2(tool) for tool in TAU_AIRLINE_TOOLS if tool.name != "think"),
    _FLIGHT_STATUS,
]
"""tau2's airline tools: tau-bench's schemas (without `think`) plus `get_flight_status`."""
