"""Every real run under ../shared/data imports with the known counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trajforge.importers import import_paths
from trajforge.store import Store, TrajectoryFilter


@pytest.fixture(scope="module")
def imported(shared_data: Path, tmp_path_factory: pytest.TempPathFactory):
    """The whole shared data imported twice into one store: (store, first, second report)."""
    path = tmp_path_factory.mktemp("real") / "real.db"
    with Store(path) as store:
        first = import_paths(store, [str(shared_data)])
        second = import_paths(store, [str(shared_data)])
        yield store, first, second


def counts(store: Store, **fields: object) -> tuple[int, int]:
    flt = TrajectoryFilter(**fields)
    return store.count(flt), store.count(flt.model_copy(update={"success": True}))


def test_nothing_fails_and_second_import_adds_nothing(imported) -> None:
    store, first, second = imported
    assert first.failed == [] and second.failed == []
    formats = 3 + 9 + 5 + 2  # formats/: ATIF files, Inspect samples, OpenHands runs, SWE-agent
    assert first.added == store.count() == 393 + 200 + 100 + 126 + 3 + 164 + formats
    assert second.added == 0
    assert second.duplicates == first.added


def test_swe_bench_runs_with_harness_verdicts(imported) -> None:
    store, _, _ = imported
    assert counts(store, harness="mini-swe-agent") == (393, 289)
    traj = next(store.query(TrajectoryFilter(harness="mini-swe-agent", limit=1)))
    assert traj.outcome.judged_by == "swe-bench-harness"
    assert traj.llm_calls and traj.llm_calls[0].usage.prompt_tokens
    first_call = traj.llm_calls[0]
    assert traj.messages[first_call.message_index].extra["response"]["usage"]


def test_tau_bench_airline_and_agentrx_retail(imported) -> None:
    store, _, _ = imported
    assert counts(store, harness="tau-bench", environment="tau-airline") == (200, 84)
    assert counts(store, harness="tau-bench", environment="tau-retail") == (100, 73)
    traj = next(store.query(TrajectoryFilter(environment="tau-airline", limit=1)))
    assert traj.source.model == "gpt-4o"
    assert traj.task.gold["actions"], "gold actions are kept"


def test_tau2_simulations(imported, shared_data: Path) -> None:
    store, first, _ = imported
    assert counts(store, harness="tau2-bench") == (164, 124)
    assert counts(store, environment="tau2-airline") == (50, 28)
    assert counts(store, environment="tau2-retail") == (114, 96)
    submission = next(p for p in first.sidecars if p.endswith("submission.json"))
    assert Path(submission).parent.name == "toolorchestra_gpt-5"
    traj = next(store.query(TrajectoryFilter(environment="tau2-retail", limit=1)))
    assert traj.source.model == "gpt-5"
    assert "reason_for_call" not in (traj.task.instruction or "") and traj.task.instruction
    assert "actions" in traj.task.gold
    assert [m.extra["turn_idx"] for m in traj.messages] == list(range(len(traj.messages)))
    assert traj.metadata["submission"]["model_name"]


def test_who_and_when_labels_point_at_mistake_step(imported, shared_data: Path) -> None:
    store, _, _ = imported
    assert counts(store, environment="who-and-when") == (129, 0)
    assert counts(store, harness="magentic-one") == (3, 0)
    runs = store.query(TrajectoryFilter(environment="who-and-when"))
    by_question = {(t.source.run, t.task.id): t for t in runs}  # both subsets share questions
    files = sorted((shared_data / "who-and-when").rglob("*.json"))
    assert len(files) == 126 + 3
    for file in files:
        raw = json.loads(file.read_text())
        traj = by_question[file.parent.name, raw["question_ID"]]
        (label,) = traj.labels
        assert label.source == "human"
        assert label.message_index == int(raw["mistake_step"]) < len(traj.messages)
        assert (
            traj.messages[label.message_index].text()
            == raw["history"][label.message_index]["content"]
        )
        assert (label.agent, label.reason) == (raw["mistake_agent"], raw["mistake_reason"])
        assert traj.task.gold == raw["ground_truth"]
        assert traj.success is False


def test_who_and_when_hand_crafted_speakers(imported, shared_data: Path) -> None:
    """Magentic-One runs name the speaker in `role`; it becomes the message's `name`."""
    store, _, _ = imported
    runs = list(store.query(TrajectoryFilter(harness="magentic-one")))
    assert sorted(t.source.run for t in runs) == ["Hand-Crafted-sample"] * 3
    by_question = {t.task.id: t for t in runs}
    for file in sorted((shared_data / "who-and-when" / "Hand-Crafted-sample").glob("*.json")):
        raw = json.loads(file.read_text())
        traj = by_question[raw["question_ID"]]
        assert [m.extra["speaker"] for m in traj.messages] == [m["role"] for m in raw["history"]]
        assert traj.messages[0].role == "user" and traj.messages[0].name == "human"
        assert all(m.role == "assistant" for m in traj.messages[1:])
        assert "system_prompts" in traj.metadata
    run_11 = by_question["624cbf11-6a41-4692-af9c-36b3e5ca3130"]
    (label,) = run_11.labels
    assert (label.message_index, label.agent) == (24, "Websurfer")  # as the label spells it
    assert run_11.messages[24].name == "WebSurfer"
    assert run_11.messages[3].name == "Orchestrator"
    assert run_11.messages[3].extra["speaker"] == "Orchestrator (-> WebSurfer)"


def test_non_trajectories_are_listed_not_failed(imported, shared_data: Path) -> None:
    _, first, _ = imported
    skipped = {Path(p).relative_to(shared_data).as_posix() for p in first.not_trajectories}
    assert "tau-bench/envs/airline/flights.json" in skipped
    assert "agentrx/tau-retail/tools_structure.json" in skipped
    assert "README.md" in skipped
    assert not any(p.endswith(".traj.json") for p in skipped)
    reports = [p for p in first.sidecars if p.endswith("report.json")]
    assert len(reports) == 393
