"""Closed sets of words: one fault-spec grammar for every `--faults`, typed kinds, old data."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.envs.faults import FaultyEnvironment, check_tools
from trajforge.envs.household import HouseholdEnv
from trajforge.errors import UserError
from trajforge.faultspec import parse_fault_spec
from trajforge.proxy.faults import upstream_faults
from trajforge.schema import Fault, Trajectory


def test_one_grammar_for_environment_and_proxy_faults() -> None:
    spec = parse_fault_spec(["transient:#2+4@look", "upstream_5xx:0.05"])
    assert spec.spec() == "transient:#2+4@look,upstream_5xx:0.05"
    assert parse_fault_spec(spec.spec()) == spec
    config = upstream_faults("upstream_timeout:0.1,upstream_5xx:0.05", seed=7, delay_s=1.5)
    assert (config.timeout, config.server_error, config.seed, config.timeout_delay_s) == (
        0.1,
        0.05,
        7,
        1.5,
    )


def test_a_kind_that_does_not_apply_is_a_clear_error() -> None:
    with pytest.raises(UserError, match="'upstream_5xx' does not apply to environments"):
        check_tools(parse_fault_spec("upstream_5xx:0.1"), HouseholdEnv())
    with pytest.raises(UserError, match="does not apply to environments"):
        FaultyEnvironment(HouseholdEnv(), parse_fault_spec("upstream_timeout:0.1"))
    with pytest.raises(UserError, match="'silent' does not apply to the proxy"):
        upstream_faults("silent:0.1")
    with pytest.raises(UserError, match=r"unknown fault kind 'flaky'.*upstream_truncated"):
        parse_fault_spec("flaky:0.1")


def test_rollout_names_the_kind_it_cannot_inject(tmp_path) -> None:
    db = str(tmp_path / "t.db")
    args = ["rollout", "--env", "household", "--faults", "upstream_5xx:0.1", "--db", db]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    assert "does not apply to environments" in result.output


def test_a_fault_kind_from_an_older_version_still_loads() -> None:
    old = Fault.model_validate({"message_index": 3, "kind": "5xx", "detail": "injected: 503"})
    assert old.kind == "other" and old.recorded_kind == "5xx"
    doc = {"task": {"id": "t"}, "faults": [{"message_index": 0, "kind": "flaky"}]}
    assert Trajectory.model_validate(doc).faults[0].recorded_kind == "flaky"


def test_harness_words_load_typed_and_are_written_back_unchanged() -> None:
    doc = {
        "task": {"id": "t"},
        "outcome": {"termination_reason": "exit_cost"},
        "faults": [{"message_index": 0, "kind": "5xx"}],
    }
    old = Trajectory.model_validate(doc)
    assert old.outcome.termination_reason == "other" and old.outcome.exit_status == "exit_cost"
    assert old.faults[0].kind == "other" and old.faults[0].recorded_kind == "5xx"
    again = Trajectory.model_validate_json(old.model_dump_json())
    assert again.model_dump_json() == old.model_dump_json()
    assert '"termination_reason":"exit_cost"' in old.model_dump_json()
    assert again.content_id() == old.content_id()
    submitted = Trajectory.model_validate({**doc, "outcome": {"termination_reason": "Submitted"}})
    assert submitted.outcome.termination_reason == "submitted"
    submitted.outcome.termination_reason = "max_steps"  # a new reason replaces the word
    assert '"termination_reason":"max_steps"' in submitted.model_dump_json()
