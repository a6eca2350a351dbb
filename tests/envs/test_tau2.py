"""tau2-bench retail and airline: replay of the 164 real simulations, judging, forking."""

from __future__ import annotations

from trajforge.agents.expert import ExpertPolicy
from trajforge.agents.user_sim import ScriptedUser
from trajforge.diagnose.counterfactual import CounterfactualLocalizer
from trajforge.envs import ENVIRONMENTS, make_env
from trajforge.envs.replay import replay_many, replay_run, replay_to
from trajforge.envs.tau2 import Tau2AirlineEnv, Tau2Env, Tau2RetailEnv
from trajforge.rollout.episode import run_episode, start_trajectory
from trajforge.rollout.fork import fork
from trajforge.schema import Task, ToolCall, Trajectory


def test_all_164_simulations_replay_exactly_and_agree_on_reward(
    tau2_runs: list[Trajectory],
) -> None:
    summary = replay_many(tau2_runs, explicit=True)
    assert summary.runs == 164
    assert summary.by_environment["tau2-airline"]["runs"] == 50
    assert summary.calls > 1400
    assert summary.exact / summary.calls >= 0.99
    assert summary.outcome_agree == 164
    assert {r.replayed_reward for r in map(replay_run, tau2_runs[:60])} == {0.0, 1.0}


def test_each_reward_component_matches_the_recorded_breakdown(
    tau2_runs: list[Trajectory],
) -> None:
    for run in tau2_runs:
        env = make_env(run)
        replay_to(env, run, len(run.messages))
        env.bind_conversation(run.messages)
        outcome = env.evaluate()
        recorded = run.outcome.details["reward_breakdown"]
        assert outcome.details["reward_breakdown"] == recorded, run.task.id
        assert outcome.details["unjudged"] == []


def test_simulations_are_matched_to_the_task_they_were_judged_against(
    tau2_runs: list[Trajectory],
) -> None:
    renumbered = [t for t in tau2_runs if "recorded_task_id" in t.metadata]
    assert len(renumbered) > 100  # the submission numbers its simulations 0..n-1
    for run in renumbered:
        checks = run.outcome.details.get("action_checks") or []
        gold = [a["name"] for a in run.task.gold["actions"]]
        assert [c["action"]["name"] for c in checks] == gold


def test_a_real_failure_forked_at_its_decisive_message_succeeds_with_the_expert(
    tau2_runs: list[Trajectory],
) -> None:
    failure = next(
        t for t in tau2_runs if t.task.environment == "tau2-retail" and not t.outcome.success
    )
    diagnosis = CounterfactualLocalizer().localize(failure)
    assert diagnosis is not None and diagnosis.step is not None
    child = fork(failure, diagnosis.step, "expert")
    assert child.outcome.success and child.outcome.reward == 1.0
    assert child.messages[: diagnosis.step] == failure.messages[: diagnosis.step]
    # the parent itself, continued unchanged, still fails: the fork changed the outcome
    assert replay_run(failure).replayed_reward == 0.0


def test_the_expert_solves_bundled_tasks_from_the_start() -> None:
    for env_class in (Tau2RetailEnv, Tau2AirlineEnv):
        env = env_class()
        tasks = env.tasks()
        assert len(tasks) == {"tau2-retail": 114, "tau2-airline": 50}[env.name]
        for task in tasks[:6]:
            assert _expert_run(env_class(), task).outcome.success, (env.name, task.id)


def test_snapshot_restore_and_tau2_behaviours() -> None:
    env = ENVIRONMENTS.get("tau2-airline")()
    env.reset(env.tasks(1)[0])
    before = env.snapshot()
    seats = '"economy": 5'
    listing = env.step(ToolCall(id="a", name="search_direct_flight", arguments=_route()))
    assert seats in listing.content
    booked = env.step(ToolCall(id="b", name="book_reservation", arguments=_booking()))
    assert '"status": null' in booked.content and '"reservation_id": "HATHAT"' in booked.content
    after = env.step(ToolCall(id="c", name="search_direct_flight", arguments=_route()))
    assert '"economy": 4' in after.content  # tau2 takes the seats it sells
    env.restore(before)
    again = env.step(ToolCall(id="d", name="search_direct_flight", arguments=_route()))
    assert again.content == listing.content
    missing = env.step(ToolCall(id="e", name="get_user_details", arguments='{"user_id": "x"}'))
    assert missing.content == "Error: User x not found"


def _expert_run(env: Tau2Env, task: Task) -> Trajectory:
    user = ScriptedUser()
    trajectory = start_trajectory(env, task)
    env.bind_conversation(trajectory.messages)  # COMMUNICATE reads the live conversation
    trajectory.messages.append(user.opening(task))
    return run_episode(env, ExpertPolicy(), task, user=user, trajectory=trajectory)


def _route() -> str:
    return '{"origin": "ATL", "destination": "SEA", "date": "2024-05-16"}'


def _booking() -> str:
    return (
        '{"user_id": "ethan_martin_2396", "origin": "ATL", "destination": "SEA", '
        '"flight_type": "one_way", "cabin": "economy", '
        '"flights": [{"flight_number": "HAT039", "date": "2024-05-16"}], '
        '"passengers": [{"first_name": "Ethan", "last_name": "Martin", "dob": "1963-05-18"}], '
        '"payment_methods": [{"payment_id": "credit_card_5447957", "amount": 157}], '
        '"total_baggages": 0, "nonfree_baggages": 0, "insurance": "no"}'
    )


def test_an_llm_user_plays_the_tau2_scenario_through_the_mock_server(
    tau2_runs: list[Trajectory],
) -> None:
    from trajforge.agents.user_sim import LLMUser
    from trajforge.models.mock_server import MockOpenAIServer
    from trajforge.models.openai_compat import OpenAICompatibleModel, OpenAIModelConfig

    failure = next(t for t in tau2_runs if not t.outcome.success)
    at = next(i for i, m in enumerate(failure.messages) if m.role == "assistant" and i > 2)
    reason = failure.task.data["user_scenario"]["instructions"]["reason_for_call"]
    with MockOpenAIServer(["Thanks, that is all. ###STOP###"]) as server:
        model = OpenAICompatibleModel(OpenAIModelConfig(base_url=server.base_url, model="m"))
        last = failure.messages[at - 1]
        prefix_end = at if last.role != "user" else at + 1
        child = fork(failure, prefix_end, ExpertPolicy(), user=LLMUser(model))
        (request,) = server.requests
    assert reason.strip()[:60] in request["messages"][0]["content"]
    assert child.messages[-1].role == "user" and "###STOP###" in child.messages[-1].text()
