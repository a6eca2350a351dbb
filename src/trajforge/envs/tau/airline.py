"""The airline domain's tools: flights, reservations and users of a small airline.

Prices are per passenger and flight; checked bags beyond the free allowance cost 50 each,
travel insurance 30 per passenger. Certificates are used up whole when booking; gift
cards are debited. Reservation changes cannot be paid with a certificate.
"""

from __future__ import annotations

import copy
from typing import Any

from trajforge.envs.tau.db import Record, TauDB
from trajforge.envs.tau.tooling import COMMON_TOOLS, Tool, array, dumps, integer, string
from trajforge.errors import ToolError

AIRPORTS = {
    "SFO": "San Francisco",
    "JFK": "New York",
    "LAX": "Los Angeles",
    "ORD": "Chicago",
    "DFW": "Dallas",
    "DEN": "Denver",
    "SEA": "Seattle",
    "ATL": "Atlanta",
    "MIA": "Miami",
    "BOS": "Boston",
    "PHX": "Phoenix",
    "IAH": "Houston",
    "LAS": "Las Vegas",
    "MCO": "Orlando",
    "EWR": "Newark",
    "CLT": "Charlotte",
    "MSP": "Minneapolis",
    "DTW": "Detroit",
    "PHL": "Philadelphia",
    "LGA": "LaGuardia",
}
NEW_RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")
NEW_CERTIFICATE_IDS = ("certificate_3221322", "certificate_3221323", "certificate_3221324")
BOOKING_TIME = "2024-05-15T15:00:00"


def _reservation(db: TauDB, reservation_id: str) -> Record:
    return db.require("reservations", reservation_id, "reservation")


def _user(db: TauDB, user_id: str) -> Record:
    return db.require("users", user_id, "user")


def _bookable_date(db: TauDB, flight_number: str, date: str, cabin: str, seats: int) -> Record:
    """The flight's data on `date`, checked to be bookable for `seats` passengers."""
    flight = db.get("flights", flight_number)
    if flight is None:
        raise ToolError(f"flight {flight_number} not found")
    if date not in flight["dates"]:
        raise ToolError(f"flight {flight_number} not found on date {date}")
    on_date = flight["dates"][date]
    if on_date["status"] != "available":
        raise ToolError(f"flight {flight_number} not available on date {date}")
    if on_date["available_seats"][cabin] < seats:
        raise ToolError(f"not enough seats on flight {flight_number}")
    return on_date


def _price_segment(db: TauDB, segment: dict, cabin: str, seats: int) -> None:
    """Fill a requested segment's price, origin and destination from the flight table."""
    on_date = _bookable_date(db, segment["flight_number"], segment["date"], cabin, seats)
    flight = db.require("flights", segment["flight_number"], f"flight {segment['flight_number']}")
    segment["price"] = on_date["prices"][cabin]
    segment["origin"] = flight["origin"]
    segment["destination"] = flight["destination"]


def _change_payment(db: TauDB, user_id: str, payment_id: str, amount: int | float) -> Record:
    """The payment method for a change of a reservation (no certificates), checked."""
    methods = _user(db, user_id)["payment_methods"]
    if payment_id not in methods:
        raise ToolError("payment method not found")
    method = methods[payment_id]
    if method["source"] == "certificate":
        raise ToolError("certificate cannot be used to update reservation")
    if method["source"] == "gift_card" and method["amount"] < amount:
        raise ToolError("gift card balance is not enough")
    return method


def _debit_gift_card(db: TauDB, user_id: str, payment_id: str, amount: int | float) -> None:
    method = db.edit("users", user_id)["payment_methods"][payment_id]
    if method["source"] == "gift_card":
        method["amount"] -= amount


def get_user_details(db: TauDB, user_id: str) -> str:
    return dumps(_user(db, user_id))


def get_reservation_details(db: TauDB, reservation_id: str) -> str:
    return dumps(_reservation(db, reservation_id))


def list_all_airports(db: TauDB) -> str:
    return dumps(AIRPORTS)


def _on_date(flight: Record, date: str) -> Record | None:
    """The flight's listing for a date when it is bookable, else None."""
    on_date = flight["dates"].get(date)
    if on_date is None or on_date["status"] != "available":
        return None
    return _listing(flight, date)


_ORIGIN_INDEX: dict[int, dict[str, list[Record]]] = {}


def _flights_from(db: TauDB, origin: str) -> list[Record]:
    """Flights leaving `origin`, in table order (indexed once per base table)."""
    if any(table == "flights" for table, _ in db.overlay):  # never written by the tools
        return [f for _, f in db.items("flights") if f["origin"] == origin]
    base = db.base["flights"]
    index = _ORIGIN_INDEX.get(id(base))
    if index is None:
        index = {}
        for flight in base.values():
            index.setdefault(flight["origin"], []).append(flight)
        _ORIGIN_INDEX[id(base)] = index
    return index.get(origin, [])


def search_direct_flight(db: TauDB, origin: str, destination: str, date: str) -> str:
    found = []
    for flight in _flights_from(db, origin):
        if flight["destination"] == destination:
            listing = _on_date(flight, date)
            if listing is not None:
                found.append(listing)
    return dumps(found)


def _connections(db: TauDB, first: Record, destination: str, date: str) -> list[list[Record]]:
    found: list[list[Record]] = []
    first_listing = _on_date(first, date)
    if first_listing is None:
        return found
    for second in _flights_from(db, first["destination"]):
        if second["destination"] != destination:
            continue
        arrives_next_day = "+1" in first["scheduled_arrival_time_est"]
        second_date = _next_day(date) if arrives_next_day else date
        if first["scheduled_arrival_time_est"] > second["scheduled_departure_time_est"]:
            continue
        if _on_date(second, second_date) is None:
            continue
        # As in the recorded runs: an overnight connection is checked on the next day but
        # listed with the seats and prices of the departure day.
        second_listing = _listing(second, date)
        found.append([first_listing | {"date": date}, second_listing | {"date": second_date}])
    return found


def _listing(flight: Record, date: str) -> Record:
    """The flight without its calendar, with its data on `date` (status, seats, prices)."""
    return {k: v for k, v in flight.items() if k != "dates"} | flight["dates"].get(date, {})


def _next_day(date: str) -> str:
    year, month, day = date.split("-")
    return f"{year}-{month}-{int(day) + 1:02d}"


def search_onestop_flight(db: TauDB, origin: str, destination: str, date: str) -> str:
    found = []
    for first in _flights_from(db, origin):
        found.extend(_connections(db, first, destination, date))
    return dumps(found)


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
    user = _user(db, user_id)
    reservation_id = next((r for r in NEW_RESERVATION_IDS if not db.has("reservations", r)), None)
    if reservation_id is None:
        raise ToolError("too many reservations created")
    segments = copy.deepcopy(flights)
    total = 0
    for segment in segments:
        _price_segment(db, segment, cabin, len(passengers))
        total += segment["price"] * len(passengers)
    if insurance == "yes":
        total += 30 * len(passengers)
    total += 50 * nonfree_baggages
    _check_booking_payment(user, payment_methods, total)
    for payment in payment_methods:
        _spend_on_booking(db, user_id, payment)
    reservation = {
        "reservation_id": reservation_id,
        "user_id": user_id,
        "origin": origin,
        "destination": destination,
        "flight_type": flight_type,
        "cabin": cabin,
        "flights": segments,
        "passengers": passengers,
        "payment_history": payment_methods,
        "created_at": BOOKING_TIME,
        "total_baggages": total_baggages,
        "nonfree_baggages": nonfree_baggages,
        "insurance": insurance,
    }
    db.insert("reservations", reservation_id, reservation)
    db.edit("users", user_id)["reservations"].append(reservation_id)
    return dumps(reservation)


def _check_booking_payment(user: Record, payment_methods: list, total: int | float) -> None:
    for payment in payment_methods:
        method = user["payment_methods"].get(payment["payment_id"])
        if method is None:
            raise ToolError(f"payment method {payment['payment_id']} not found")
        stored = method["source"] in ("gift_card", "certificate")
        if stored and method["amount"] < payment["amount"]:
            raise ToolError(f"not enough balance in payment method {payment['payment_id']}")
    paid = sum(payment["amount"] for payment in payment_methods)
    if paid != total:
        raise ToolError(f"payment amount does not add up, total price is {total}, but paid {paid}")


def _spend_on_booking(db: TauDB, user_id: str, payment: dict[str, Any]) -> None:
    methods = db.edit("users", user_id)["payment_methods"]
    method = methods[payment["payment_id"]]
    if method["source"] == "gift_card":
        method["amount"] -= payment["amount"]
    elif method["source"] == "certificate":
        del methods[payment["payment_id"]]


def cancel_reservation(db: TauDB, reservation_id: str) -> str:
    _reservation(db, reservation_id)
    reservation = db.edit("reservations", reservation_id)
    refunds = [
        {"payment_id": payment["payment_id"], "amount": -payment["amount"]}
        for payment in reservation["payment_history"]
    ]
    reservation["payment_history"].extend(refunds)
    reservation["status"] = "cancelled"
    return dumps(reservation)


def send_certificate(db: TauDB, user_id: str, amount: int | float) -> str:
    user = _user(db, user_id)
    free = [c for c in NEW_CERTIFICATE_IDS if c not in user["payment_methods"]]
    if not free:
        raise ToolError("too many certificates")
    certificate_id = free[0]
    db.edit("users", user_id)["payment_methods"][certificate_id] = {
        "source": "certificate",
        "amount": amount,
        "id": certificate_id,
    }
    return f"Certificate {certificate_id} added to user {user_id} with amount {amount}."


def update_reservation_baggages(
    db: TauDB, reservation_id: str, total_baggages: int, nonfree_baggages: int, payment_id: str
) -> str:
    reservation = _reservation(db, reservation_id)
    cost = 50 * max(0, nonfree_baggages - reservation["nonfree_baggages"])
    _change_payment(db, reservation["user_id"], payment_id, cost)
    reservation = db.edit("reservations", reservation_id)
    reservation["total_baggages"] = total_baggages
    reservation["nonfree_baggages"] = nonfree_baggages
    if cost != 0:
        reservation["payment_history"].append({"payment_id": payment_id, "amount": cost})
        _debit_gift_card(db, reservation["user_id"], payment_id, cost)
    return dumps(reservation)


def _price_new_itinerary(db: TauDB, reservation: Record, cabin: str, flights: list) -> list:
    """The requested segments priced; unchanged segments in the same cabin keep their price."""
    seats = len(reservation["passengers"])
    segments = copy.deepcopy(flights)
    for segment in segments:
        kept = next(
            (
                old
                for old in reservation["flights"]
                if old["flight_number"] == segment["flight_number"]
                and old["date"] == segment["date"]
                and cabin == reservation["cabin"]
            ),
            None,
        )
        if kept is None:
            _price_segment(db, segment, cabin, seats)
        else:
            segment.update(
                price=kept["price"], origin=kept["origin"], destination=kept["destination"]
            )
    return segments


def update_reservation_flights(
    db: TauDB, reservation_id: str, cabin: str, flights: list, payment_id: str
) -> str:
    reservation = _reservation(db, reservation_id)
    segments = _price_new_itinerary(db, reservation, cabin, flights)
    seats = len(reservation["passengers"])
    difference = sum(s["price"] for s in segments) * seats
    difference -= sum(old["price"] for old in reservation["flights"]) * seats
    _change_payment(db, reservation["user_id"], payment_id, difference)
    reservation = db.edit("reservations", reservation_id)
    reservation["flights"] = segments  # the `cabin` field stays as it was (as recorded)
    if difference != 0:
        reservation["payment_history"].append({"payment_id": payment_id, "amount": difference})
        _debit_gift_card(db, reservation["user_id"], payment_id, difference)
    return dumps(reservation)


def update_reservation_passengers(db: TauDB, reservation_id: str, passengers: list) -> str:
    reservation = _reservation(db, reservation_id)
    if len(passengers) != len(reservation["passengers"]):
        raise ToolError("number of passengers does not match")
    reservation = db.edit("reservations", reservation_id)
    reservation["passengers"] = passengers
    return dumps(reservation)


_RESERVATION_ID = string("The six-character reservation id, e.g. 'ZFA04Y'.")
_SEGMENTS = array(
    "Flight segments of the itinerary.",
    {
        "type": "object",
        "properties": {
            "flight_number": string("Flight number, e.g. 'HAT001'."),
            "date": string("Date of the flight, 'YYYY-MM-DD'."),
        },
        "required": ["flight_number", "date"],
    },
)
_PASSENGERS = array(
    "Passengers with first name, last name and date of birth.",
    {
        "type": "object",
        "properties": {
            "first_name": string("First name."),
            "last_name": string("Last name."),
            "dob": string("Date of birth, 'YYYY-MM-DD'."),
        },
        "required": ["first_name", "last_name", "dob"],
    },
)
_CABIN = string("Cabin class.", enum=["basic_economy", "economy", "business"])
_PAYMENT_ID = string("A payment method id of the user, e.g. 'credit_card_0000000'.")
_ROUTE = {
    "origin": string("IATA code of the origin airport, e.g. 'JFK'."),
    "destination": string("IATA code of the destination airport, e.g. 'LAX'."),
    "date": string("Date, 'YYYY-MM-DD'."),
}

AIRLINE_TOOLS: list[Tool] = [
    Tool(
        "get_user_details",
        "The user's profile: name, address, payment methods, membership, reservations.",
        get_user_details,
        {"user_id": string("The user id, e.g. 'sara_doe_496'.")},
    ),
    Tool(
        "get_reservation_details",
        "A reservation: flights, passengers, cabin, bags, insurance, payments.",
        get_reservation_details,
        {"reservation_id": _RESERVATION_ID},
    ),
    Tool("list_all_airports", "All airports: IATA code and city.", list_all_airports),
    Tool(
        "search_direct_flight",
        "Direct flights between two airports on a date that can still be booked.",
        search_direct_flight,
        dict(_ROUTE),
    ),
    Tool(
        "search_onestop_flight",
        "Itineraries with one connection between two airports departing on a date.",
        search_onestop_flight,
        dict(_ROUTE),
    ),
    Tool(
        "book_reservation",
        "Book a reservation; the payments must add up to the total price. Confirm first.",
        book_reservation,
        {
            "user_id": string("The user id."),
            "origin": string("IATA code of the trip's origin."),
            "destination": string("IATA code of the trip's destination."),
            "flight_type": string("Trip type.", enum=["one_way", "round_trip"]),
            "cabin": _CABIN,
            "flights": _SEGMENTS,
            "passengers": _PASSENGERS,
            "payment_methods": array(
                "Payment ids and amounts.",
                {
                    "type": "object",
                    "properties": {
                        "payment_id": string("Payment method id."),
                        "amount": {"type": "number", "description": "Amount paid."},
                    },
                    "required": ["payment_id", "amount"],
                },
            ),
            "total_baggages": integer("Checked bags in total."),
            "nonfree_baggages": integer("Checked bags that must be paid for."),
            "insurance": string("Travel insurance.", enum=["yes", "no"]),
        },
        writes=True,
    ),
    Tool(
        "cancel_reservation",
        "Cancel a whole reservation; payments are refunded to their methods. Confirm first.",
        cancel_reservation,
        {"reservation_id": _RESERVATION_ID},
        writes=True,
    ),
    Tool(
        "update_reservation_flights",
        "Replace a reservation's flights (all segments, changed or not) and cabin; the price "
        "difference is paid or refunded with the given method. Confirm first.",
        update_reservation_flights,
        {
            "reservation_id": _RESERVATION_ID,
            "cabin": _CABIN,
            "flights": _SEGMENTS,
            "payment_id": _PAYMENT_ID,
        },
        writes=True,
    ),
    Tool(
        "update_reservation_baggages",
        "Change a reservation's checked bags; extra paid bags cost 50 each. Confirm first.",
        update_reservation_baggages,
        {
            "reservation_id": _RESERVATION_ID,
            "total_baggages": integer("New number of checked bags."),
            "nonfree_baggages": integer("New number of paid checked bags."),
            "payment_id": _PAYMENT_ID,
        },
        writes=True,
    ),
    Tool(
        "update_reservation_passengers",
        "Replace the passengers' details (the number of passengers cannot change). Confirm first.",
        update_reservation_passengers,
        {"reservation_id": _RESERVATION_ID, "passengers": _PASSENGERS},
        writes=True,
    ),
    Tool(
        "send_certificate",
        "Give the user a travel certificate as compensation. Only when the policy allows.",
        send_certificate,
        {"user_id": string("The user id."), "amount": {"type": "number", "description": "Value."}},
        writes=True,
    ),
    *COMMON_TOOLS,
]
