"""TRL's SFTTrainer on every writer's file: which tokens carry loss.

Each test writes a writer's training rows to a file, runs TRL 1.16's `SFTTrainer` on it for
one optimizer step (a tiny random Llama with SmolLM2's real tokenizer, see
`loss_positions`), and checks, on the rows as TRL tokenized them, that every token of each
learned turn carries loss and no token of the prompt or of a labelled mistake does. The
same check fails on the rows `trajforge rft` wrote before the training-row schema.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

from tests.train.loss_positions import (
    TEMPLATE,
    loss_positions,
    smollm2_tokenizer,
    train_one_step,
    turn_text,
)

from trajforge.agents.expert import ExpertPolicy
from trajforge.agents.household_teacher import NoisyObservableTeacher, ObservableTeacher
from trajforge.diagnose.heuristics import localize_heuristic
from trajforge.diagnose.model import Verification
from trajforge.diagnose.storage import save_diagnoses
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.export import export
from trajforge.generate.guided import GuidedRecovery, RecoverConfig, recover_runs, write_recovered
from trajforge.generate.pairs import fork_pair, sibling_pairs
from trajforge.generate.recovery import first_labelled_error, recovery_rows
from trajforge.generate.rft import rft_dataset
from trajforge.generate.rows import write_forms, write_rows
from trajforge.generate.views import write_views
from trajforge.importers.tau_bench import TauBenchImporter
from trajforge.rollout.episode import Limits, run_episode
from trajforge.store import Store

OLD_RFT = Path(__file__).resolve().parents[1] / "data" / "old-rft"
AIRLINE = "tau-bench/historical_trajectories/gpt-4o-airline.json"


@pytest.fixture(scope="module")
def tokenizer(smollm_dir: Path):
    return smollm2_tokenizer(smollm_dir)


def _check_file(path: Path, tokenizer, tmp_path: Path, rows: int = 4) -> list[dict]:
    """The rows TRL trained on (those with a masked turn in context first), each checked."""
    trainer = train_one_step(path, tokenizer, tmp_path / "trl", rows=rows)
    prepared = list(trainer.train_dataset)
    for row in prepared:
        loss_positions(tokenizer, row)
    return prepared


def _noisy_runs(count: int, error_rate: float = 0.3) -> list:
    runs = []
    for seed in range(count):
        noisy = NoisyObservableTeacher(seed=seed, error_rate=error_rate)
        runs.append(
            run_episode(HouseholdEnv(), noisy, task_for(seed, 1), limits=Limits(max_steps=20))
        )
    return runs


def test_the_template_renders_plain_messages_as_smollm2_does(tokenizer) -> None:
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    ours = tokenizer.apply_chat_template(chat, tokenize=False, chat_template=TEMPLATE)
    stock = tokenizer.apply_chat_template(
        chat, tokenize=False, chat_template=tokenizer.stock_template
    )
    assert ours == stock


def test_rft_rows_teach_no_labelled_mistake(tokenizer, tmp_path: Path) -> None:
    runs = [t for t in _noisy_runs(8) if t.outcome.success]
    runs += [run_episode(HouseholdEnv(), ExpertPolicy(), task_for(9, 1))]
    result = rft_dataset(runs, "household", tmp_path / "rft")
    assert result.counts["masked_turns"] > 0
    forms = {path.name.split(".")[1]: path for path in result.data}
    assert set(forms) == {"messages", "prompt-completion"}
    checked = _check_file(forms["prompt-completion"], tokenizer, tmp_path)
    assert len(checked) == 4 and all(row["masked"] for row in checked)
    assert _check_file(forms["messages"], tokenizer, tmp_path, rows=2)


def test_the_check_fails_when_a_learned_turn_or_the_prompt_is_mislabelled(
    tokenizer, tmp_path: Path
) -> None:
    runs = [t for t in _noisy_runs(8) if t.outcome.success]
    result = rft_dataset(runs, "household", tmp_path / "rft")
    path = next(p for p in result.data if "prompt-completion" in p.name)
    row = dict(train_one_step(path, tokenizer, tmp_path / "trl", rows=2).train_dataset[0])
    loss_positions(tokenizer, row)
    with pytest.raises(AssertionError, match="carries no loss"):
        loss_positions(tokenizer, row | {"labels": [-100] * len(row["labels"])})
    with pytest.raises(AssertionError, match="outside the learned turns"):
        loss_positions(tokenizer, row | {"labels": row["input_ids"]})


def test_rows_of_the_old_rft_shape_teach_the_mistakes(tokenizer, tmp_path: Path) -> None:
    """Before the schema, `rft` wrote whole runs with nothing masked; TRL learns their
    labelled mistakes (the check that passes on the new rows fails here)."""
    mistakes = orjson.loads((OLD_RFT / "mistakes.json").read_bytes())
    trainer = train_one_step(OLD_RFT / "train.jsonl", tokenizer, tmp_path / "trl")
    for row, labelled in zip(trainer.train_dataset, mistakes, strict=True):
        with pytest.raises(AssertionError, match="labelled mistake is learned"):
            loss_positions(tokenizer, row, mistakes=labelled)


def test_lab_recovery_rows_teach_the_continuation_not_the_error(tokenizer, tmp_path) -> None:
    forks = [(t, e) for t in _noisy_runs(12) if (e := first_labelled_error(t)) is not None]
    rows = recovery_rows(HouseholdEnv, forks[:3], ObservableTeacher(), 20, "R")
    errors = {t.content_id(): e for t, e in forks[:3]}
    assert {r["parent_run_id"] for r in rows} <= set(errors)
    assert all(r["learned"] != [errors[r["parent_run_id"]]] for r in rows)
    assert all(
        errors[r["parent_run_id"]] in r["masked"]
        for r in rows
        if r["learned"][0] > errors[r["parent_run_id"]]
    )
    files = write_forms(tmp_path / "lab.jsonl", rows)
    assert set(files) == {"prompt-completion"}
    checked = _check_file(files["prompt-completion"], tokenizer, tmp_path, rows=6)
    assert len(checked) == 6 and any(row["masked"] for row in checked)


def _diagnosed_airline(shared_data: Path) -> list:
    runs = [t.with_id() for t in TauBenchImporter().read(shared_data / AIRLINE)]
    failures = sorted((t for t in runs if not t.outcome.success), key=lambda t: len(t.messages))
    pairs = []
    for traj in failures[:6]:  # the shortest: long runs make slow steps, not better checks
        diagnosis = localize_heuristic(traj)
        if diagnosis is None or diagnosis.step is None or diagnosis.correction is None:
            continue
        if diagnosis.correction.tool_call is None:  # advice text: no recovery row
            continue
        diagnosis.with_id()
        diagnosis.verification = Verification(method="evidence", verified=True, detail="test")
        pairs.append((traj, diagnosis))
    return pairs


def test_aet_views_teach_the_correction_and_the_diagnosis(
    tokenizer, tmp_path: Path, shared_data: Path
) -> None:
    card = write_views(_diagnosed_airline(shared_data), tmp_path / "views")
    assert card["recovery_items"] >= 1
    assert _check_file(tmp_path / "views" / "recovery.jsonl", tokenizer, tmp_path, rows=1)
    assert _check_file(tmp_path / "views" / "diagnosis.jsonl", tokenizer, tmp_path, rows=1)


def test_recover_rows_leave_the_failed_prefix_unlearned(
    tokenizer, tmp_path: Path, tau2_runs: list
) -> None:
    from trajforge.agents.user_sim import ScriptedUser

    failures = sorted(
        (t for t in tau2_runs if not t.outcome.success), key=lambda t: len(t.messages)
    )
    failures = failures[:2]
    recovery = GuidedRecovery(ExpertPolicy, ScriptedUser, RecoverConfig(sources=["correction"]))
    report, demos = recover_runs(failures, recovery, {})
    files = write_recovered(demos, report, tmp_path / "recovered")
    checked = [row for path in files for row in _check_file(path, tokenizer, tmp_path, rows=2)]
    assert len(checked) >= 2 and any(row["masked"] for row in checked)


def test_export_sft_rows_from_a_store(tokenizer, tmp_path: Path, shared_data: Path) -> None:
    with Store(tmp_path / "runs.db") as store:
        store.add_many(_noisy_runs(6))
        pairs = _diagnosed_airline(shared_data)[:1]
        store.add_many([traj for traj, _ in pairs])
        save_diagnoses(store, [diagnosis for _, diagnosis in pairs])
        count = export("sft", store, tmp_path / "sft.jsonl")
    assert count > 0
    pc = tmp_path / "sft.prompt-completion.jsonl"
    rows = [orjson.loads(line) for line in pc.read_bytes().splitlines()]
    recovery = next(i for i, r in enumerate(rows) if r["kind"] == "recovery")
    ordered = tmp_path / "ordered.jsonl"  # the recovery row and a household row, first
    ordered.write_bytes(b"".join(orjson.dumps(rows[i]) + b"\n" for i in (recovery, 0)))
    checked = _check_file(ordered, tokenizer, tmp_path, rows=2)
    assert {row["kind"] for row in checked} == {"recovery", "success"}


def test_dpo_trainer_reads_fork_and_sibling_pairs(tokenizer, tmp_path: Path) -> None:
    """DPOTrainer, one step on exported pairs: the prompt is the run before the step, the
    chosen and rejected sequences are exactly the two actions."""
    runs = _noisy_runs(10)
    forks = [(t, e) for t in runs if (e := first_labelled_error(t)) is not None]
    pairs = [
        p for t, e in forks[:4] if (p := fork_pair(HouseholdEnv, t, e, ObservableTeacher(), 20))
    ]
    pairs += sibling_pairs(
        runs + [run_episode(HouseholdEnv(), ExpertPolicy(), task_for(s, 1)) for s in range(10)]
    )
    assert {p["method"] for p in pairs} == {"fork", "siblings"}
    path = tmp_path / "pairs.jsonl"
    write_rows(path, pairs)
    trainer = train_one_step(path, tokenizer, tmp_path / "dpo", kind="dpo", rows=4)
    for row in trainer.train_dataset:
        prompt = tokenizer.apply_chat_template(
            row["prompt"], tokenize=False, add_generation_prompt=True
        )
        assert tokenizer.decode(row["prompt_ids"]) == prompt
        for side in ("chosen", "rejected"):
            assert tokenizer.decode(row[f"{side}_ids"]) == turn_text(row[side][0]) + "\n"
