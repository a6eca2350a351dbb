"""Distillation on real tau-bench retail runs: contrasts and a chat model behind the mock
server; every candidate judged on runs of tasks it was not distilled from."""

from __future__ import annotations

import pytest

from trajforge.models.mock_server import MockOpenAIServer
from trajforge.models.openai_compat import OpenAICompatibleModel, OpenAIModelConfig
from trajforge.schema import StrategyRule, Trajectory
from trajforge.strategies.candidates import Candidate, ContrastProposer
from trajforge.strategies.distil import DistilConfig, distil, held_out_task
from trajforge.strategies.llm import DistillationFailed, LLMProposer
from trajforge.strategies.patterns import check, first_calls

CONFIG = DistilConfig(family="tau-retail")
AUTHENTICATE = StrategyRule(first="find_user_id_by_email", then="modify_pending_order_items")


def test_contrast_keeps_only_candidates_that_held_out_tasks_support(retail_runs):
    report = distil(retail_runs, [ContrastProposer()], CONFIG)
    assert report.distil_runs + report.held_out_runs == 100
    assert report.judged and len(report.kept()) < len(report.judged)  # some are rejected
    held_tasks = {r.task.id for r in retail_runs if held_out_task(r.task.id, CONFIG.held_out)}
    for item in report.judged:
        effect = item.strategy.effect
        assert effect is not None
        lift = effect.held_out.lift()
        supported = min(effect.held_out.followed, effect.held_out.violated) >= CONFIG.min_each
        assert item.kept == (supported and lift is not None and lift > 0)
        # evidence comes from the distillation side only
        assert not {e.task_id for e in item.strategy.evidence} & held_tasks
    assert AUTHENTICATE in [s.rule for s in report.kept()]


def test_evidence_points_at_the_message_that_follows_or_breaks_the_rule(retail_runs):
    report = distil(retail_runs, [ContrastProposer()], CONFIG)
    kept = next(s for s in report.kept() if s.rule == AUTHENTICATE)
    by_id = {r.id: r for r in retail_runs}
    for evidence in kept.evidence:
        run = by_id[evidence.trajectory_id]
        checked = check(AUTHENTICATE, first_calls(run))
        assert checked is not None and checked.message_index == evidence.message_index
        assert checked.followed == (evidence.kind != "failure")
        call = run.messages[evidence.message_index].tool_calls[0]
        assert call.name in {AUTHENTICATE.first, AUTHENTICATE.then}


def _llm(server: MockOpenAIServer) -> OpenAICompatibleModel:
    return OpenAICompatibleModel(
        OpenAIModelConfig(base_url=server.base_url, model="m", api_key="x", max_retries=0)
    )


def test_an_llm_candidate_is_parsed_checked_and_judged_the_same_way(retail_runs):
    answer = "\n".join(
        [
            '{"first": "find_user_id_by_email", "then": "modify_pending_order_items", '
            '"text": "Authenticate the user by email before changing an order."}',
            '{"first": "log_in", "then": "cancel_pending_order", "text": "unknown action"}',
            "Here are the rules.",
        ]
    )
    with MockOpenAIServer([answer]) as server:
        proposer = LLMProposer(_llm(server))
        report = distil(retail_runs, [proposer], CONFIG)
        prompt = server.requests[0]["messages"][0]["content"]
    assert "SUCCESS: " in prompt and "FAILURE: " in prompt
    assert proposer.rejected_lines == 2
    [item] = report.judged
    assert item.strategy.source == "llm" and item.kept
    assert item.strategy.text == "Authenticate the user by email before changing an order."


def test_a_failing_model_fails_the_distillation(retail_runs: list[Trajectory]):
    failures = [{"status": 500, "error": "down"}] * 3
    with MockOpenAIServer(failures) as server, pytest.raises(DistillationFailed, match="down"):
        distil(retail_runs, [LLMProposer(_llm(server))], CONFIG)


def test_a_candidate_no_held_out_run_speaks_to_is_not_kept(retail_runs):
    class Fixed:
        source = "contrast"

        def propose(self, runs):
            rule = StrategyRule(first="think", then="no_such_tool")
            return [Candidate(rule, "never applies", "contrast")]

    [item] = distil(retail_runs, [Fixed()], CONFIG).judged
    assert not item.kept and item.strategy.effect.held_out.runs == 0


def test_verified_diagnoses_mark_the_failures_that_broke_the_rule_at_the_decisive_message(
    tmp_path, shared_data
):
    from typer.testing import CliRunner

    from trajforge.cli.main import app
    from trajforge.diagnose.storage import load_diagnoses
    from trajforge.importers import import_paths
    from trajforge.store import Store, TrajectoryFilter
    from trajforge.strategies.run import distil_store

    db = tmp_path / "s.db"
    with Store(db) as store:
        import_paths(store, [str(shared_data / "agentrx/tau-retail/tau_dataset_full.json")])
    diagnosed = CliRunner().invoke(app, ["diagnose", "--env", "tau-retail", "--db", str(db)])
    assert diagnosed.exit_code == 0, diagnosed.output
    with Store(db) as store:
        outcome = distil_store(store, TrajectoryFilter(), [ContrastProposer()], CONFIG)
        decisive = {d.trajectory_id: d.step for d in load_diagnoses(store, verified_only=True)}
    kept = next(s for s in outcome.stored if s.rule == AUTHENTICATE)
    marked = [e for e in kept.evidence if e.decisive]
    assert marked and all(e.kind == "failure" for e in marked)
    assert all(decisive[e.trajectory_id] == e.message_index for e in marked)
    unmarked = [e for e in kept.evidence if e.kind == "failure" and not e.decisive]
    assert all(decisive.get(e.trajectory_id) != e.message_index for e in unmarked)
