"""Option sets: a group of flags declared once, spread into a command and gathered back."""

from __future__ import annotations

from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from trajforge.cli.options import (
    Endpoint,
    Offer,
    PolicyFlags,
    RunFilter,
    RunFilterNoOutcome,
    option_sets,
)
from trajforge.errors import UserError

OtherModel = Annotated[str | None, typer.Option("--agent-model", help="Another flag.")]


def _app(command) -> typer.Typer:
    app = typer.Typer()
    app.command()(option_sets(command))
    app.command("noop")(lambda: None)  # two commands: the test names the one it runs
    return app


def test_a_set_is_spread_into_flags_and_gathered_back() -> None:
    seen = {}

    def command(
        name: Annotated[str, typer.Argument()],
        runs: RunFilter = RunFilter(),
        llm: PolicyFlags = PolicyFlags(temperature=0.7),
        json_out: Annotated[bool, typer.Option("--json")] = False,
    ) -> None:
        seen.update(name=name, runs=runs, llm=llm, json_out=json_out)

    args = ["command", "x", "--env", "household", "--limit", "3", "--llm-model", "m", "--json"]
    result = CliRunner().invoke(_app(command), args)
    assert result.exit_code == 0, result.output
    assert seen["runs"] == RunFilter(env="household", limit=3)
    assert seen["llm"] == PolicyFlags(llm_model="m", temperature=0.7)  # the default given
    assert seen["name"] == "x" and seen["json_out"] is True
    flt = seen["runs"].selection(ids=["abc"])
    assert (flt.environment, flt.limit, flt.ids, flt.success) == ("household", 3, ["abc"], None)


def test_offer_leaves_flags_out_and_renames_one() -> None:
    seen = {}

    def command(
        runs: Annotated[RunFilter, Offer(without=("outcome",), options={"model": OtherModel})] = (
            RunFilter()
        ),
        endpoint: Annotated[Endpoint, Offer(without=("api_key",))] = Endpoint(),
    ) -> None:
        seen.update(runs=runs, endpoint=endpoint)

    app = _app(command)
    result = CliRunner().invoke(app, ["command", "--agent-model", "gpt", "--base-url", "http://h"])
    assert result.exit_code == 0, result.output
    assert seen["runs"] == RunFilter(model="gpt")
    assert seen["endpoint"] == Endpoint(base_url="http://h")
    for absent in ("--outcome", "--api-key", "--model"):
        result = CliRunner().invoke(app, ["command", absent, "x"])
        assert result.exit_code == 2 and "No such option" in result.output


def test_the_outcome_is_checked_and_a_command_may_fix_it() -> None:
    with pytest.raises(UserError, match="--outcome must be 'success', 'failure' or 'model_error'"):
        RunFilter(outcome="maybe").selection()
    assert RunFilter().selection(outcome="failure").success is False
    assert RunFilter(outcome="success").selection().success is True


def test_two_sets_with_one_field_name_are_refused() -> None:
    def command(runs: RunFilter = RunFilter(), more: RunFilterNoOutcome = RunFilter()) -> None:
        pass

    with pytest.raises(TypeError, match="repeat a parameter name"):
        option_sets(command)


def test_policy_flags_make_the_policy_options() -> None:
    flags = PolicyFlags(base_url="http://h/v1", llm_model="m", api_key="k", error_rate=0.5)
    options = flags.options()
    assert (options.base_url, options.model, options.api_key) == ("http://h/v1", "m", "k")
    assert (options.error_rate, options.temperature) == (0.5, 0.0)
    assert Endpoint(llm_model="m").model_config().model == "m"


def test_agent_flags_make_the_spec_of_fork_and_handoff() -> None:
    from trajforge.cli.envs import AgentFlags

    flags = AgentFlags(seed=3, error_rate=0.4, user="llm", max_steps=7)
    spec = flags.spec("noisy-expert", Endpoint(base_url="http://h/v1", llm_model="m"))
    assert (spec.policy, spec.user, spec.options.error_rate) == ("noisy-expert", "llm", 0.4)
    assert (spec.options.base_url, spec.options.model) == ("http://h/v1", "m")
    assert flags.limits().max_steps == 7
    with pytest.raises(UserError, match="--user must be 'scripted' or 'llm', got 'bot'"):
        AgentFlags(user="bot").spec("expert", Endpoint())
