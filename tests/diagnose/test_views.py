"""Training views: prompt-completion training rows that `datasets` loads; verified items by
default."""

from __future__ import annotations

from pathlib import Path

import datasets
import orjson

from trajforge.diagnose.heuristics import localize_heuristic
from trajforge.diagnose.model import Verification
from trajforge.generate.views import write_views
from trajforge.schema import Trajectory

from .conftest import pick


def _pairs(airline_runs: list[Trajectory], who_and_when_runs: list[Trajectory]) -> list:
    pairs = []
    for traj in [pick(airline_runs, "0"), pick(airline_runs, "1"), *who_and_when_runs[:3]]:
        diagnosis = localize_heuristic(traj)
        assert diagnosis is not None
        diagnosis.with_id()
        diagnosis.verification = Verification(method="evidence", verified=False)
        pairs.append((traj, diagnosis))
    pairs[0][1].verification = Verification(method="fork", verified=True, detail="test")
    return pairs


def _load(path: Path) -> datasets.Dataset:
    return datasets.load_dataset("json", data_files=str(path), split="train")


def test_views_load_and_hold_only_verified_items(
    tmp_path: Path, airline_runs: list[Trajectory], who_and_when_runs: list[Trajectory]
) -> None:
    pairs = _pairs(airline_runs, who_and_when_runs)
    card = write_views(pairs, tmp_path)
    diagnosis_view = _load(tmp_path / "diagnosis.jsonl")
    recovery_view = _load(tmp_path / "recovery.jsonl")
    assert len(diagnosis_view) == len(recovery_view) == 1
    assert diagnosis_view[0]["verified"] is True
    assert diagnosis_view[0]["run_id"] == pairs[0][0].id
    assert diagnosis_view[0]["diagnosis_id"] == pairs[0][1].id
    target = orjson.loads(diagnosis_view[0]["completion"][0]["content"])
    assert target["step"] == 28 and target["category"] == "tool_misuse"
    row = recovery_view[0]
    assert len(row["prompt"]) == 28 + 1  # messages 0..27, then the feedback
    assert row["prompt_end"] == 28 and row["learned"] == [28] and row["feedback"] is True
    assert row["prompt"][-1]["role"] == "user" and "Feedback" in row["prompt"][-1]["content"]
    assert all(m["role"] != "system" for m in row["prompt"][1:])
    [target_message] = row["completion"]
    call = target_message["tool_calls"][0]["function"]
    assert call["name"] == "book_reservation"
    assert orjson.loads(call["arguments"])["nonfree_baggages"] == 0
    assert card["verified_runs"] == 1 and card["by_category"] == {"tool_misuse": 1}
    assert (tmp_path / "dataset_card.md").read_text().startswith("# trajforge")


def test_all_items_on_request(
    tmp_path: Path, airline_runs: list[Trajectory], who_and_when_runs: list[Trajectory]
) -> None:
    from trajforge.generate.views import ViewsConfig

    pairs = _pairs(airline_runs, who_and_when_runs)
    card = write_views(pairs, tmp_path, ViewsConfig(verified_only=False))
    assert card["diagnosis_items"] == 5
    assert card["by_environment"] == {"who-and-when": 3, "tau-airline": 2}
    view = _load(tmp_path / "diagnosis.jsonl")
    assert sorted(set(view["verified"])) == [False, True]
    assert set(view["environment"]) == {"tau-airline", "who-and-when"}


def test_recovery_view_carries_the_environment_tools(
    tmp_path: Path, airline_runs: list[Trajectory], who_and_when_runs: list[Trajectory]
) -> None:
    write_views(_pairs(airline_runs, who_and_when_runs), tmp_path)
    row = orjson.loads((tmp_path / "recovery.jsonl").read_bytes().splitlines()[0])
    names = {tool["function"]["name"] for tool in row["tools"]}
    assert {"book_reservation", "get_user_details"} <= names


def test_views_import_back_into_a_store(
    tmp_path: Path, airline_runs: list[Trajectory], who_and_when_runs: list[Trajectory]
) -> None:
    """trajforge reads its own views (chat JSONL with `tools` as a JSON string)."""
    from trajforge.generate.views import ViewsConfig
    from trajforge.importers import import_paths
    from trajforge.store import Store

    write_views(_pairs(airline_runs, who_and_when_runs), tmp_path, ViewsConfig(verified_only=False))
    with Store(tmp_path / "views.db") as store:
        report = import_paths(
            store, [str(tmp_path / "diagnosis.jsonl"), str(tmp_path / "recovery.jsonl")]
        )
        assert report.failed == [] and report.added >= 5
        recovered = [t for t in store.query() if t.tools]
    assert recovered and {"book_reservation"} <= {t["function"]["name"] for t in recovered[0].tools}
