"""Rebuild the data bundled in `tau2/data/` from a copy of the tau2-bench and tau-bench data.

    python -m trajforge.envs.tau2.bundle DATA_DIR

`DATA_DIR` holds `tau2-bench/domains/{retail,airline}/` (tasks, policy, task splits, the
retail database) and `tau-bench/envs/airline/` (the airline tables). tau2's airline
database holds the same flights, users and reservations as tau-bench's, in tau2's own
layout; `airline_tables` rebuilds that layout (checked by replaying the recorded tau2
airline simulations, see the package README).
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path
from typing import Any

import orjson

DOMAINS = ("retail", "airline")
HERE = Path(__file__).parent / "data"


def airline_tables(tau_airline: Path) -> dict[str, dict[str, Any]]:
    """tau-bench's airline tables in tau2's layout (user ids inside users, float balances,
    credit cards as source/id/brand/last_four, a `status` on every reservation)."""
    users = orjson.loads((tau_airline / "users.json").read_bytes())
    reservations = orjson.loads((tau_airline / "reservations.json").read_bytes())
    flights = orjson.loads((tau_airline / "flights.json").read_bytes())
    tables = {
        "flights": flights,
        "users": {key: _user(key, user) for key, user in users.items()},
        "reservations": {key: _reservation(r) for key, r in reservations.items()},
    }
    apply_tau2_revisions(tables)
    return tables


def apply_tau2_revisions(tables: dict[str, dict[str, Any]]) -> None:
    """Two records where tau2's airline data differs from tau-bench's, as the recorded tau2
    runs show them (they are the only differences replay finds):

    - reservation Z7GOZK goes EWR -> IAH and back (`round_trip`); tau-bench's record says
      `destination` EWR, `one_way` (a `get_reservation_details` output shows the whole
      record before any change);
    - flight HAT018 on 2024-05-11 is `delayed` (two `get_flight_status` outputs); tau-bench
      has it landed. tau2's estimated times for it are not shown anywhere, so the date
      keeps only its status.
    """
    reservation = tables["reservations"]["Z7GOZK"]
    reservation["destination"] = "IAH"
    reservation["flight_type"] = "round_trip"
    tables["flights"]["HAT018"]["dates"]["2024-05-11"] = {"status": "delayed"}


def _user(user_id: str, user: dict[str, Any]) -> dict[str, Any]:
    address = user["address"]
    return {
        "user_id": user_id,
        "name": user["name"],
        "address": {k: address[k] for k in ("address1", "address2", "city", "country")}
        | {"state": address["state"], "zip": address["zip"]},
        "email": user["email"],
        "dob": user["dob"],
        "payment_methods": {k: _payment_method(m) for k, m in user["payment_methods"].items()},
        "saved_passengers": user["saved_passengers"],
        "membership": user["membership"],
        "reservations": user["reservations"],
    }


def _payment_method(method: dict[str, Any]) -> dict[str, Any]:
    head = {"source": method["source"], "id": method["id"]}
    if "amount" in method:
        return head | {"amount": float(method["amount"])}
    return head | {"brand": method["brand"], "last_four": method["last_four"]}


def _reservation(reservation: dict[str, Any]) -> dict[str, Any]:
    flights = [
        {k: segment[k] for k in ("flight_number", "origin", "destination", "date", "price")}
        for segment in reservation["flights"]
    ]
    return reservation | {"flights": flights, "status": reservation.get("status")}


def write_gz(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(orjson.dumps(data), mtime=0))


def bundle(data_dir: Path, out: Path = HERE) -> None:
    domains = data_dir / "tau2-bench" / "domains"
    for domain in DOMAINS:
        source = domains / domain
        if domain == "retail":
            tables = orjson.loads((source / "db.json").read_bytes())
        else:
            tables = airline_tables(data_dir / "tau-bench" / "envs" / "airline")
        write_gz(out / domain / "db.json.gz", tables)
        write_gz(out / domain / "tasks.json.gz", orjson.loads((source / "tasks.json").read_bytes()))
        write_gz(
            out / domain / "split_tasks.json.gz",
            orjson.loads((source / "split_tasks.json").read_bytes()),
        )
        (out / domain / "policy.md").write_text((source / "policy.md").read_text())


if __name__ == "__main__":
    bundle(Path(sys.argv[1]))
