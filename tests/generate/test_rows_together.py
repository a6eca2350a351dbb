"""Every writer's files load together in one `datasets` call; the schema's own rules."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from trajforge.agents.expert import ExpertPolicy
from trajforge.agents.household_teacher import NoisyObservableTeacher, ObservableTeacher
from trajforge.agents.user_sim import ScriptedUser
from trajforge.diagnose.heuristics import localize_heuristic
from trajforge.diagnose.model import Verification
from trajforge.diagnose.storage import save_diagnoses
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.export import export
from trajforge.generate.guided import GuidedRecovery, RecoverConfig, recover_runs, write_recovered
from trajforge.generate.pairs import fork_pair
from trajforge.generate.recovery import first_labelled_error, recovery_rows
from trajforge.generate.rft import rft_dataset
from trajforge.generate.rows import (
    ROW_MODELS,
    chat_message,
    dataset_features,
    validate_row,
    write_forms,
    write_rows,
)
from trajforge.generate.views import write_views
from trajforge.importers.tau_bench import TauBenchImporter
from trajforge.rollout.episode import Limits, run_episode
from trajforge.schema import Message
from trajforge.store import Store

AIRLINE = "tau-bench/historical_trajectories/gpt-4o-airline.json"


def _noisy(count: int) -> list:
    runs = []
    for seed in range(count):
        teacher = NoisyObservableTeacher(seed=seed, error_rate=0.3)
        runs.append(
            run_episode(HouseholdEnv(), teacher, task_for(seed, 1), limits=Limits(max_steps=20))
        )
    return runs


def _airline(shared_data: Path) -> list:
    runs = [t.with_id() for t in TauBenchImporter().read(shared_data / AIRLINE)]
    pairs = []
    for traj in [t for t in runs if not t.outcome.success][:8]:
        diagnosis = localize_heuristic(traj)
        if diagnosis is not None and diagnosis.step is not None:
            diagnosis.verification = Verification(method="evidence", verified=True)
            pairs.append((traj, diagnosis.with_id()))
    return pairs


def test_every_writers_files_load_in_one_datasets_call(
    tmp_path: Path, shared_data: Path, tau2_runs: list
) -> None:
    import datasets

    runs = _noisy(8)
    clean = run_episode(HouseholdEnv(), ExpertPolicy(), task_for(9, 1))
    files = list(rft_dataset([*runs, clean], "household", tmp_path / "rft").data)
    forks = [(t, e) for t in runs if (e := first_labelled_error(t)) is not None]
    lab = recovery_rows(HouseholdEnv, forks[:2], ObservableTeacher(), 20, "R")
    files += write_forms(tmp_path / "lab.jsonl", lab).values()
    pairs = [
        p for t, e in forks[:2] if (p := fork_pair(HouseholdEnv, t, e, ObservableTeacher(), 20))
    ]
    write_rows(tmp_path / "pairs.jsonl", pairs)
    files.append(tmp_path / "pairs.jsonl")
    failures = [t for t in tau2_runs if not t.outcome.success][:2]
    recovery = GuidedRecovery(ExpertPolicy, ScriptedUser, RecoverConfig(sources=["correction"]))
    report, demos = recover_runs(failures, recovery, {})
    files += write_recovered(demos, report, tmp_path / "recovered")
    diagnosed = _airline(shared_data)
    write_views(diagnosed, tmp_path / "views")
    files += [tmp_path / "views" / "diagnosis.jsonl", tmp_path / "views" / "recovery.jsonl"]
    with Store(tmp_path / "runs.db") as store:
        store.add_many(runs + [t for t, _ in diagnosed])
        save_diagnoses(store, [d for _, d in diagnosed])
        export("sft", store, tmp_path / "export.jsonl")
        export("dpo", store, tmp_path / "export-pairs.jsonl")
    files += [*sorted(tmp_path.glob("export.*.jsonl")), tmp_path / "export-pairs.jsonl"]
    rows = [orjson.loads(line) for path in files for line in path.read_bytes().splitlines()]
    assert all(validate_row(row) for row in rows)
    assert {row["writer"] for row in rows} == {
        "rft", "lab", "pairs", "recover", "aet-diagnosis", "aet-recovery", "export"
    }  # fmt: skip
    assert {row["form"] for row in rows} == set(ROW_MODELS)
    loaded = datasets.load_dataset(
        "json", data_files=[str(p) for p in files], split="train", features=dataset_features()
    )
    assert loaded.num_rows == len(rows)
    assert loaded["run_id"] == [row["run_id"] for row in rows]
    first_call = next(r for r in loaded if r["messages"] and len(r["messages"]) > 2)["messages"][2]
    assert isinstance(first_call["tool_calls"][0]["function"]["arguments"], str)


def test_a_row_that_breaks_a_rule_is_refused() -> None:
    good = {"form": "prompt-completion", "writer": "export", "run_id": "r", "learned": [1],
            "prompt": [{"role": "user", "content": "u"}],
            "completion": [{"role": "assistant", "content": "a"}], "tools": []}  # fmt: skip
    validate_row(good)
    late_system = good | {"prompt": [*good["prompt"], {"role": "system", "content": "s"}]}
    with pytest.raises(ValueError, match="system message can only be the first"):
        validate_row(late_system)
    with pytest.raises(ValueError, match="completion holds assistant messages only"):
        validate_row(good | {"completion": [{"role": "user", "content": "u"}]})
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
    with pytest.raises(ValueError, match="arguments"):
        validate_row(
            good | {"completion": [{"role": "assistant", "content": "", "tool_calls": [call]}]}
        )
    with pytest.raises(ValueError, match="tools"):
        validate_row(good | {"tools": "[]"})


def test_a_late_system_message_becomes_a_user_message() -> None:
    assert chat_message(Message(role="system", content="s"), first=True)["role"] == "system"
    assert chat_message(Message(role="system", content="guidance"))["role"] == "user"
