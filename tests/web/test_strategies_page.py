"""The strategies pages over a real store holding strategies distilled from real runs."""

from __future__ import annotations

from pathlib import Path

import httpx

from trajforge.importers import import_paths
from trajforge.store import Store, TrajectoryFilter
from trajforge.strategies.candidates import ContrastProposer
from trajforge.strategies.distil import DistilConfig
from trajforge.strategies.run import distil_store
from trajforge.web import UiConfig, create_app

from .conftest import serve_app

NAME = "tau-retail/find_user_id_by_email-before-modify_pending_order_items"


def test_the_library_page_lists_and_the_strategy_page_shows_evidence(
    tmp_path: Path, shared_data: Path
):
    db = tmp_path / "ui.db"
    with Store(db) as store:
        import_paths(store, [str(shared_data / "agentrx/tau-retail/tau_dataset_full.json")])
        outcome = distil_store(
            store, TrajectoryFilter(), [ContrastProposer()], DistilConfig(family="tau-retail")
        )
    stored = next(s for s in outcome.stored if s.name == NAME)
    with serve_app(create_app(UiConfig(db=db))) as base:
        listing = httpx.get(f"{base}/strategies")
        one = httpx.get(f"{base}/strategies/view", params={"name": NAME})
        missing = httpx.get(f"{base}/strategies/view", params={"name": "nope"})
        api = httpx.get(f"{base}/api/strategies")
    assert listing.status_code == 200
    assert "find_user_id_by_email" in listing.text and "held-out" in listing.text
    assert one.status_code == 200
    for evidence in stored.evidence:
        assert f"/runs/{evidence.trajectory_id}" in one.text
    assert "Held-out" in one.text and "Versions" in one.text
    assert missing.status_code == 404
    assert NAME in {s["name"] for s in api.json()}
