"""The two tau domains as environment classes (registered as `tau-retail`, `tau-airline`)."""

from __future__ import annotations

from trajforge.envs.tau.airline import AIRLINE_TOOLS
from trajforge.envs.tau.env import TauEnv
from trajforge.envs.tau.retail import RETAIL_TOOLS


class TauRetailEnv(TauEnv):
    """An online shop: users, orders, products (500 users, 1000 orders)."""

    domain = "retail"
    name = "tau-retail"
    tool_list = RETAIL_TOOLS


class TauAirlineEnv(TauEnv):
    """An airline: users, reservations, flights (500 users, 2000 reservations)."""

    domain = "airline"
    name = "tau-airline"
    tool_list = AIRLINE_TOOLS
