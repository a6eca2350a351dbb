"""Forking real tau runs: identical state at the fork point, policies, CLI, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajforge.agents import ExpertPolicy, LLMPolicy
from trajforge.agents.base import EpisodeState, PolicyStep
from trajforge.agents.user_sim import ScriptedUser
from trajforge.cli.main import app
from trajforge.envs import make_env
from trajforge.envs.replay import replay_to
from trajforge.envs.tau import TauRetailEnv, bundled_tasks
from trajforge.importers.tau_bench import TauBenchImporter
from trajforge.models.scripted import ScriptedModel
from trajforge.rollout.episode import run_episode
from trajforge.rollout.factory import AgentSpec, ForkPoint, PolicyOptions, build
from trajforge.rollout.fork import fork
from trajforge.rollout.handoff import start_conversation
from trajforge.schema import Message, Source, ToolCall, Trajectory
from trajforge.store import Store

RETAIL_RUNS = "agentrx/tau-retail/tau_dataset_full.json"


@pytest.fixture(scope="module")
def retail_runs(shared_data: Path) -> list[Trajectory]:
    return [t.with_id() for t in TauBenchImporter().read(shared_data / RETAIL_RUNS)]


class _HashProbe:
    """The expert, recording the live state hash each time it is asked to act."""

    name = "probe"

    def __init__(self) -> None:
        self.expert = ExpertPolicy()
        self.seen: dict[int, str] = {}

    def act(self, state: EpisodeState) -> PolicyStep:
        self.seen[len(state.messages)] = state.env.state_hash()
        return self.expert.act(state)


def test_replayed_state_equals_the_live_state_at_every_step() -> None:
    task = next(t for t in bundled_tasks("tau-retail") if len(t.gold["actions"]) >= 5)
    live_env, probe, user = TauRetailEnv(), _HashProbe(), ScriptedUser()
    start = start_conversation(live_env, task, user, Source(harness="test"))
    live = run_episode(live_env, probe, task, user=user, trajectory=start).with_id()
    assert live.success and len(set(probe.seen.values())) > 1
    fresh = make_env(live)
    for n, live_hash in probe.seen.items():
        replay_to(fresh, live, n)
        assert fresh.state_hash() == live_hash, n
    at = sorted(probe.seen)[len(probe.seen) // 2]
    child = fork(live, at, ExpertPolicy(), user=ScriptedUser())
    assert child.messages[:at] == live.messages[:at]
    replay_to(fresh, child, at)
    assert fresh.state_hash() == probe.seen[at]
    assert child.success


def test_expert_fork_of_failed_runs(retail_runs: list[Trajectory]) -> None:
    """At the midpoint the expert can still rescue a run; at the end only when no wrong
    write has happened (the oracle's distance is not None)."""
    failed = [t for t in retail_runs if t.success is False]
    assert len(failed) == 27
    for parent in failed:
        at = len(parent.messages) // 2
        child = fork(parent, at, ExpertPolicy(), user=ScriptedUser())
        assert [m.content for m in child.messages[:at]] == [m.content for m in parent.messages[:at]]
        assert child.parent.trajectory_id == parent.id and child.parent.message_index == at
        assert child.success
        end = len(parent.messages) - (parent.messages[-1].role == "user")
        env = make_env(parent)
        replay_to(env, parent, end)
        env.bind_conversation(parent.messages[:end])
        reachable = env.distance() is not None and not env.done  # no hand-over yet
        late = fork(parent, end, ExpertPolicy(), user=ScriptedUser())
        assert late.success == reachable, parent.id


def test_replay_fork_reproduces_the_parent(retail_runs: list[Trajectory]) -> None:
    for parent in retail_runs[:8]:
        at = len(parent.messages) // 2
        policy, user = build("replay", parent=ForkPoint(parent, at))
        child = fork(parent, at, policy, user=user)
        assert [m.text() for m in child.messages] == [m.text() for m in parent.messages]
        assert child.outcome.reward == parent.outcome.reward


def _gold_script(task) -> list[Message]:
    calls = [
        Message(
            role="assistant",
            tool_calls=[ToolCall(id=f"c{i}", name=a["name"], arguments=json.dumps(a["kwargs"]))],
        )
        for i, a in enumerate(task.gold["actions"])
    ]
    return [
        *calls,
        Message(role="assistant", content="All done: " + ", ".join(task.gold["outputs"])),
    ]


def test_llm_policy_fork_with_the_scripted_model(retail_runs: list[Trajectory]) -> None:
    parent = next(t for t in retail_runs if t.success is False)
    child = fork(
        parent, 2, LLMPolicy(ScriptedModel(_gold_script(parent.task))), user=ScriptedUser()
    )
    assert child.success
    assert child.llm_calls and child.llm_calls[0].message_index == 2


def test_llm_policy_fork_through_the_mock_openai_server(retail_runs: list[Trajectory]) -> None:
    from trajforge.models.mock_server import MockOpenAIServer

    parent = next(t for t in retail_runs if t.success is False)
    script = [
        {"tool_calls": [{"name": a["name"], "arguments": a["kwargs"]}]}
        for a in parent.task.gold["actions"]
    ] + ["Everything is done. " + ", ".join(parent.task.gold["outputs"])]
    with MockOpenAIServer(script=script) as server:
        options = PolicyOptions(base_url=server.base_url, model="mock")
        policy, user = build(AgentSpec(policy="llm", options=options))
        child = fork(parent, 2, policy, user=user)
        assert len(server.requests) == len(script)
        assert server.requests[0]["tools"]  # the tau tool schemas were offered
    assert child.success
    assert all(call.model for call in child.llm_calls)


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def tau_db(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("fork") / "t.db"
    result = _invoke("import", str(shared_data / RETAIL_RUNS), "--db", str(db))
    assert result.exit_code == 0, result.output
    return db


def test_cli_fork_stores_a_child_that_names_its_parent(tau_db: Path) -> None:
    with Store(tau_db) as store:
        parent = next(t for t in store.query() if t.success is False and t.parent is None)
    at = len(parent.messages) // 2
    result = _invoke(
        "fork", parent.id, "--at", str(at), "--policy", "expert", "--db", str(tau_db), "--json"
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["parent"], summary["at"]) == (parent.id, at)
    assert isinstance(summary["success"], bool)
    shown = json.loads(_invoke("show", summary["id"], "--db", str(tau_db), "--json").stdout)
    assert shown["parent"] == {"trajectory_id": parent.id, "message_index": at}


def test_cli_fork_twice_with_the_same_arguments_stores_one_child(tau_db: Path) -> None:
    """The id is the content without clock readings: the same fork is the same child."""
    with Store(tau_db) as store:
        parent = next(t for t in store.query() if t.success is False and t.parent is None)
        before = store.count()
    args = ["fork", parent.id, "--at", "3", "--policy", "expert", "--db", str(tau_db), "--json"]
    first, second = (json.loads(_invoke(*args).stdout) for _ in range(2))
    assert first["id"] == second["id"]
    with Store(tau_db) as store:
        assert store.count() == before + 1
        assert store.get(first["id"]).usage.wall_time_s is not None  # kept in the document


def test_cli_noisy_expert_fork_is_seeded(tau_db: Path) -> None:
    with Store(tau_db) as store:
        parent = next(t for t in store.query() if t.parent is None)
    args = [
        "fork",
        parent.id,
        "--at",
        "2",
        "--policy",
        "noisy-expert",
        "--seed",
        "5",
        "--error-rate",
        "0.5",
        "--db",
        str(tau_db),
        "--json",
    ]
    first, second = (json.loads(_invoke(*args).stdout)["id"] for _ in range(2))
    with Store(tau_db) as store:
        runs = [store.get(first), store.get(second)]
    assert runs[0].messages == runs[1].messages  # same seed, same mistakes
    assert runs[0].labels == runs[1].labels


def _assert_refused(db: Path, args: list[str], message: str, store_option: bool = True) -> None:
    with Store(db) as store:
        before = store.count()
    result = _invoke(*args, *(["--db", str(db)] if store_option else []))
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.output
    with Store(db) as store:
        assert store.count() == before


def test_cli_bad_fork_input_is_one_line_and_stores_nothing(tau_db: Path, shared_data: Path) -> None:
    with Store(tau_db) as store:
        parent = next(t for t in store.query() if t.parent is None)
    end = len(parent.messages)
    _assert_refused(tau_db, ["fork", parent.id, "--at", str(end + 1)], "past the end")
    _assert_refused(tau_db, ["fork", parent.id, "--at", "-1"], "negative")
    _assert_refused(
        tau_db, ["fork", parent.id, "--at", "2", "--policy", "bogus"], "unknown policy 'bogus'"
    )
    _assert_refused(tau_db, ["fork", "nosuchid", "--at", "2"], "nosuchid")
    swe = (
        shared_data / "swe-bench-verified/mini-swe-agent_gemini-3-pro/trajs/astropy__astropy-13033"
    )
    assert _invoke("import", str(swe), "--db", str(tau_db)).exit_code == 0
    with Store(tau_db) as store:
        swe_run = next(t for t in store.query() if t.source.harness == "mini-swe-agent")
    _assert_refused(tau_db, ["fork", swe_run.id, "--at", "2"], "no SWE-bench instance")
    _assert_refused(
        tau_db,
        ["handoff", "--env", "bogus", "--reacher", "expert", "--solver", "expert"],
        "unknown environment 'bogus'",
        store_option=False,
    )


def test_runs_with_injected_faults_replay_to_the_live_state() -> None:
    """Transient and persistent faults kept the tool from running: replay skips them; silent
    faults ran it. Either way the rebuilt state equals the live one."""
    from trajforge.envs.faults import FaultyEnvironment, parse_fault_spec
    from trajforge.envs.replay import replay_run

    checked = 0
    for task in list(bundled_tasks("tau-retail"))[:12]:
        spec = parse_fault_spec("transient:0.4,silent:0.3")
        live_env = FaultyEnvironment(TauRetailEnv(), spec, seed=3)
        probe, user = _HashProbe(), ScriptedUser()
        start = start_conversation(live_env, task, user, Source(harness="test"))
        live = run_episode(live_env, probe, task, user=user, trajectory=start).with_id()
        if not live.faults:
            continue
        checked += 1
        fresh = make_env(live)
        for n, live_hash in probe.seen.items():
            replay_to(fresh, live, n)
            assert fresh.state_hash() == live_hash, (task.id, n)
        report = replay_run(live)
        assert report.faulted == len(live.faults)
        assert report.exact == report.calls and report.outcome_agree
    assert checked >= 3


def test_cli_llm_fork_against_the_mock_server(tau_db: Path) -> None:
    from trajforge.models.mock_server import MockOpenAIServer

    with Store(tau_db) as store:
        parent = next(t for t in store.query() if t.success is False and t.parent is None)
    gold = parent.task.gold
    script = [
        {"tool_calls": [{"name": a["name"], "arguments": a["kwargs"]}]} for a in gold["actions"]
    ]
    script.append("Done. " + ", ".join(gold["outputs"]))
    with MockOpenAIServer(script=script) as server:
        result = _invoke(
            "fork",
            parent.id,
            "--at",
            "2",
            "--policy",
            "llm",
            "--base-url",
            server.base_url,
            "--llm-model",
            "mock-model",
            "--db",
            str(tau_db),
            "--json",
        )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["success"] is True and summary["policy"] == "llm:mock-model"
    with Store(tau_db) as store:
        child = store.get(summary["id"])
    assert len(child.llm_calls) == len(script)


def test_cli_fork_with_the_llm_user_simulator(tau_db: Path) -> None:
    from trajforge.models.mock_server import MockOpenAIServer

    with Store(tau_db) as store:
        parent = next(t for t in store.query() if t.success is False and t.parent is None)
    at = len(parent.messages) // 2
    while parent.messages[at - 1].role != "assistant" or parent.messages[at - 1].tool_calls:
        at += 1  # fork right after an assistant text: the (LLM) user speaks first
    with MockOpenAIServer(script=["Yes, go ahead please.", "Thanks! ###STOP###"]) as server:
        result = _invoke(
            "fork",
            parent.id,
            "--at",
            str(at),
            "--policy",
            "expert",
            "--user",
            "llm",
            "--base-url",
            server.base_url,
            "--llm-model",
            "user-model",
            "--db",
            str(tau_db),
            "--json",
        )
        requests = list(server.requests)
    assert result.exit_code == 0, result.output
    with Store(tau_db) as store:
        child = store.get(json.loads(result.stdout)["id"])
    assert (
        child.messages[at].role == "user" and child.messages[at].text() == "Yes, go ahead please."
    )
    assert child.messages[-1].text() == "Thanks! ###STOP###"
    assert requests and all("tools" not in r for r in requests)  # the user model has no tools
    assert requests[0]["messages"][0]["role"] == "system"


def test_fork_after_a_hand_over_runs_nothing(retail_runs: list[Trajectory]) -> None:
    parent = next(
        t
        for t in retail_runs
        if any(m.name == "transfer_to_human_agents" for m in t.messages if m.role == "tool")
    )
    at = 1 + max(
        i
        for i, m in enumerate(parent.messages)
        if m.role == "tool" and m.name == "transfer_to_human_agents"
    )
    child = fork(parent, at, ExpertPolicy(), user=ScriptedUser())
    assert len(child.messages) == at
    assert child.outcome.termination_reason == "env_done"


def test_fork_by_policy_name_and_default_user(retail_runs: list[Trajectory]) -> None:
    parent = next(t for t in retail_runs if t.success is False)
    at = len(parent.messages) // 2
    by_name = fork(parent, at, "expert")
    by_object = fork(parent, at, ExpertPolicy())  # tau is conversational: scripted user
    assert by_name.success and by_object.success
    assert [m.text() for m in by_name.messages] == [m.text() for m in by_object.messages]
    replayed = fork(parent, at, "replay")
    assert [m.text() for m in replayed.messages] == [m.text() for m in parent.messages]
