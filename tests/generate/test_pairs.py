"""Preference pairs: from forks at labelled mistakes, from verified corrections, from
sibling rollouts; `export --format dpo`."""

from __future__ import annotations

from pathlib import Path

import orjson
from typer.testing import CliRunner

from trajforge.agents.expert import ExpertPolicy, NoisyExpertPolicy
from trajforge.agents.household_teacher import NoisyObservableTeacher, ObservableTeacher
from trajforge.cli.main import app
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.generate.pairs import fork_pair, sibling_pairs
from trajforge.generate.recovery import action_key, first_labelled_error
from trajforge.generate.rows import chat_messages, validate_row
from trajforge.rollout.episode import Limits, run_episode
from trajforge.store import Store


def _noisy(seed: int):
    teacher = NoisyObservableTeacher(seed=seed, error_rate=0.3)
    return run_episode(HouseholdEnv(), teacher, task_for(seed, 1), limits=Limits(max_steps=20))


def test_a_fork_pair_rejects_the_labelled_mistake_for_the_forks_action() -> None:
    runs = [_noisy(seed) for seed in range(12)]
    forks = [(t, e) for t in runs if (e := first_labelled_error(t)) is not None][:4]
    assert forks
    for traj, error in forks:
        pair = fork_pair(HouseholdEnv, traj, error, ObservableTeacher(), 20)
        assert pair is not None and validate_row(pair)
        assert pair["run_id"] == traj.content_id() and pair["learned"] == [error]
        assert pair["prompt"] == chat_messages(traj.messages[:error])
        assert pair["rejected"] == chat_messages(traj.messages)[error : error + 1]
        assert pair["chosen"] != pair["rejected"] and pair["method"] == "fork"
        assert pair["chosen_run_id"] and pair["verified"] is True


def test_no_pair_where_the_fork_acts_as_the_run_did() -> None:
    run = run_episode(HouseholdEnv(), ExpertPolicy(), task_for(3, 1))
    step = run.assistant_indices()[0]
    assert fork_pair(HouseholdEnv, run, step, ExpertPolicy(), 20) is None


def test_sibling_pairs_part_where_a_passing_and_a_failing_rollout_differ() -> None:
    runs = [run_episode(HouseholdEnv(), ExpertPolicy(), task_for(s, 1)) for s in range(6)]
    for seed in range(6):
        policy = NoisyExpertPolicy(seed=seed, error_rate=0.5)
        runs.append(
            run_episode(HouseholdEnv(), policy, task_for(seed, 1), limits=Limits(max_steps=6))
        )
    pairs = sibling_pairs(runs)
    failing = [t for t in runs if t.outcome.success is False]
    assert pairs and len(pairs) <= len(failing)
    by_id = {t.content_id(): t for t in runs}
    for pair in pairs:
        loser, winner = by_id[pair["run_id"]], by_id[pair["chosen_run_id"]]
        step = pair["prompt_end"]
        assert loser.outcome.success is False and winner.outcome.success
        assert chat_messages(winner.messages[:step]) == pair["prompt"]
        assert action_key(winner.messages[step]) != action_key(loser.messages[step])


def test_export_dpo_writes_pairs_of_a_store(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with Store(db) as store:
        store.add_many([run_episode(HouseholdEnv(), ExpertPolicy(), task_for(0, 1))])
        policy = NoisyExpertPolicy(seed=1, error_rate=0.6)
        store.add_many(
            [run_episode(HouseholdEnv(), policy, task_for(0, 1), limits=Limits(max_steps=5))]
        )
    out = tmp_path / "pairs.jsonl"
    result = CliRunner().invoke(app, ["export", "--db", str(db), "-f", "dpo", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "preference pairs" in result.output
    [pair] = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert pair["form"] == "preference" and pair["method"] == "siblings"
    empty = CliRunner().invoke(
        app, ["export", "--db", str(db), "-f", "dpo", "--outcome", "success", "-o", str(out)]
    )
    assert empty.exit_code == 1 and empty.output.startswith("error: no preference pairs")
