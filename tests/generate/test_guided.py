"""Guided recovery: guidance search with a scripted teacher, stripping, leak check,
provenance, LLM-proposed guidance through the mock server, intervene-and-replay, export."""

from __future__ import annotations

import re
from pathlib import Path

import datasets
import orjson
import pytest
from typer.testing import CliRunner

from trajforge.agents.base import EpisodeState, PolicyStep
from trajforge.agents.expert import ExpertPolicy
from trajforge.agents.user_sim import ScriptedUser
from trajforge.cli.main import app
from trajforge.envs.tau import TauRetailEnv
from trajforge.generate.guided import (
    GUIDANCE_HEADER,
    ForkRunner,
    GuidedRecovery,
    Job,
    LLMGuidanceProposer,
    RecoverConfig,
    find_leaks,
    recover_runs,
    with_guidance,
    write_recovered,
)
from trajforge.generate.guided.guidance import STRATEGIES_INTRO, Guidance, strategy_guidance
from trajforge.generate.guided.search import system_prompt
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.models.openai_compat import OpenAICompatibleModel, OpenAIModelConfig
from trajforge.rollout.episode import run_episode
from trajforge.rollout.handoff import start_conversation
from trajforge.schema import Message, Source, Strategy, Task, ToolCall, Trajectory

CALL = re.compile(r"call (\w+)\((\{.*\})\)")
SAY = re.compile(r"tell the user: (.*)")


class PlanFollower:
    """A scripted teacher that can only act on guidance: it carries out the steps its
    system prompt lists (`call name({...})`, `tell the user: ...`); without guidance it
    gives up."""

    name = "plan-follower"

    def __init__(self, chatter: str = "") -> None:
        self.done = 0
        self.chatter = chatter

    def act(self, state: EpisodeState) -> PolicyStep:
        system = state.messages[0].text() if state.messages[0].role == "system" else ""
        steps = [m for line in system.splitlines() if (m := CALL.search(line) or SAY.search(line))]
        if self.done >= len(steps):
            return _say("I am sorry, I am not able to help with this.")
        step = steps[self.done]
        self.done += 1
        if step.re is SAY:
            return _say(f"{self.chatter}All set. {step.group(1)}")
        call = ToolCall(id=f"call_{self.done}", name=step.group(1), arguments=step.group(2))
        message = Message(role="assistant", content=self.chatter or None, tool_calls=[call])
        return PolicyStep(message=message)


def _say(text: str) -> PolicyStep:
    return PolicyStep(message=Message(role="assistant", content=text))


@pytest.fixture(scope="module")
def failed_run() -> Trajectory:
    """The scripted teacher's own failure on a tau-retail task that needs writes."""
    env = TauRetailEnv()
    task = next(t for t in env.tasks() if len(t.gold["actions"]) >= 4 and not t.gold["outputs"])
    user = ScriptedUser()
    start = start_conversation(env, task, user, Source(harness="test"))
    run = run_episode(env, PlanFollower(), task, user=user, trajectory=start).with_id()
    assert run.outcome.success is False
    return run


def _recovery(teacher=PlanFollower, **config) -> GuidedRecovery:
    return GuidedRecovery(teacher, ScriptedUser, RecoverConfig(**config))


def test_guidance_turns_the_teachers_failure_into_a_clean_demo(failed_run: Trajectory) -> None:
    recovery = _recovery(sources=["correction", "privileged"], starts=["start"])
    result, demo = recovery.recover(failed_run, None)
    assert result.recovered and result.source == "privileged" and result.privileged
    assert result.unavailable == ["correction"]  # no diagnosis: no correction to render
    assert demo is not None and demo.outcome.success
    provenance = demo.metadata["recovery"]
    assert provenance["parent"] == failed_run.id
    assert provenance["source"] == "privileged" and provenance["privileged"] is True
    assert provenance["rounds"] == 1 and provenance["start"] == "start"
    guidance = provenance["guidance"]
    assert "call " in guidance
    everything = " ".join(m.text() for m in demo.messages) + str(demo.llm_calls)
    assert GUIDANCE_HEADER not in everything and guidance not in everything
    assert "A plan that completes this task" not in everything
    assert find_leaks(demo, Guidance(text=guidance, source="privileged", privileged=True), 0) == []


def test_the_leak_check_rejects_a_planted_leak(failed_run: Trajectory) -> None:
    leaky = _recovery(
        teacher=lambda: PlanFollower(chatter="As the hint told me, I followed the plan. "),
        sources=["privileged"],
        starts=["start"],
    )
    result, demo = leaky.recover(failed_run, None)
    assert demo is None and not result.recovered
    assert result.leak_rejections == 1
    assert "refers to 'hint'" in result.attempts[0].leaks[0]


def test_the_leak_check_finds_copied_guidance_wording() -> None:
    guidance = Guidance(
        text="Check the order status twice before you cancel anything for the customer.",
        source="llm",
        privileged=False,
    )
    demo = Trajectory(
        task=Task(id="t"),
        messages=[
            Message(role="user", content="Cancel my order please."),
            Message(role="assistant", content="I will check the order status twice before I go."),
        ],
    )
    (reason,) = find_leaks(demo, guidance, at=1)
    assert "5-grams" in reason
    assert find_leaks(demo, guidance, at=2) == []  # only the teacher's own messages count


def _llm_recovery(base_url: str, rounds: int) -> GuidedRecovery:
    """Recovery whose only guidance source is an LLM at `base_url`, from the start."""
    model = OpenAICompatibleModel(OpenAIModelConfig(base_url=base_url, model="mock"))
    return GuidedRecovery(
        PlanFollower,
        ScriptedUser,
        RecoverConfig(sources=["llm"], starts=["start"], llm_rounds=rounds),
        proposer=LLMGuidanceProposer(model),
    )


def test_an_llm_proposed_guidance_round_through_the_mock_server(failed_run: Trajectory) -> None:
    plan = _plan_text(failed_run)
    with MockOpenAIServer(["Be careful and polite.", plan]) as server:
        recovery = _llm_recovery(server.base_url, rounds=3)
        result, demo = recovery.recover(failed_run, None)
        first, second = (r["messages"][1]["content"] for r in server.requests)
    assert "Failed attempt" in first and "Verifier: reward 0.0" in first
    assert "Be careful and polite." in second and "Verifier on that attempt" in second
    assert result.recovered and result.source == "llm" and not result.privileged
    assert [a.success for a in result.attempts] == [False, True]
    assert demo is not None and demo.metadata["recovery"]["round"] == 2


def _plan_text(run: Trajectory) -> str:
    env = TauRetailEnv()
    env.reset(run.task)
    lines = []
    for action in env.gold.actions:
        lines.append(f"- call {action.name}({action.arguments})")
    return "Do exactly this:\n" + "\n".join(lines)


def test_intervene_and_replay_and_export_on_real_tau2_failures(
    tau2_runs: list[Trajectory], tmp_path: Path
) -> None:
    failures = [t for t in tau2_runs if not t.outcome.success][:3]
    recovery = GuidedRecovery(ExpertPolicy, ScriptedUser, RecoverConfig(sources=["correction"]))
    report, demos = recover_runs(failures, recovery, {})
    assert report.failures == 3 and report.intervene.tried == 3
    assert report.intervene.recovered == 3  # the expert continues after the correction
    assert all(d.metadata["recovery"]["source"] == "correction" for d in demos)
    files = write_recovered(demos, report, tmp_path)
    loaded = datasets.load_dataset("json", data_files=[str(f) for f in files], split="train")
    by_run = {d.content_id(): d for d in demos}
    assert set(loaded["run_id"]) == set(by_run)
    assert set(loaded["parent_run_id"]) == {f.id for f in failures}
    for row in loaded:  # the failed run's prefix, before the fork, is never learned
        at = by_run[row["run_id"]].metadata["recovery"]["at"]
        assert row["learned"] and min(row["learned"]) >= at
        assert all(i < at for i in row["masked"])


def test_recover_command(shared_data: Path, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    runs = shared_data / "tau2-bench/toolorchestra_gpt-5/toolorchestra_airline_gpt-5_1trial.json"
    runner = CliRunner(env={"TRAJFORGE_PROGRESS_EVERY": "0"})
    imported = runner.invoke(app, ["import", str(runs), "--db", str(db)])
    assert imported.exit_code == 0 and "import: file 1/1 (100%)" in imported.stderr
    out = tmp_path / "out"
    args = ["recover", "--db", str(db), "--teacher", "expert", "--limit", "4", "--json"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert '"failures": ' in result.stdout and list(out.glob("recovered.*.jsonl"))
    lines = [line for line in result.stderr.splitlines() if line.startswith("recover: run ")]
    assert lines[0].startswith("recover: run 0/4 (0%)") and "ETA" in lines[1]
    assert lines[-1].startswith("recover: run 4/4 (100%)")
    bad = runner.invoke(app, ["recover", "--db", str(db), "--source", "magic"])
    assert bad.exit_code == 1 and "--source must be one of" in bad.output


def test_a_teacher_continuing_a_run_without_system_message_gets_the_policy_and_guidance(
    tau2_runs: list[Trajectory],
) -> None:
    run = next(t for t in tau2_runs if not t.outcome.success)
    assert run.messages[0].role == "assistant"  # tau2 records no system message
    guidance = Guidance(text="Check the membership first.", source="llm", privileged=False)
    view = with_guidance(run.messages[:4], guidance, system_prompt(run))
    assert view[0].role == "system" and view[1:] == run.messages[:4]
    assert view[0].text().startswith("# ") and view[0].text().endswith(guidance.text)


def test_household_privileged_guidance_tries_the_hidden_state_hint_first() -> None:
    from trajforge.envs.household import HouseholdEnv

    env = HouseholdEnv()
    task = env.tasks(3, seed=1)[2]
    start = start_conversation(env, task, None, Source(harness="test"))
    failed = run_episode(env, PlanFollower(), task, trajectory=start).with_id()
    assert failed.outcome.success is False
    result, demo = _recovery(sources=["privileged"], starts=["start"]).recover(failed, None)
    hint, plan = result.attempts
    assert not hint.success and plan.success and result.rounds == 2
    assert demo is not None and demo.metadata["recovery"]["guidance"].startswith("A plan")


def test_a_runner_receives_each_stage_of_the_search_as_one_batch(
    tau2_runs: list[Trajectory],
) -> None:
    class Batches(ForkRunner):
        def __init__(self, *args) -> None:
            super().__init__(*args)
            self.sizes: list[int] = []

        def run(self, jobs: list[Job]) -> list[Trajectory]:
            self.sizes.append(len(jobs))
            return super().run(jobs)

    failures = [t for t in tau2_runs if not t.outcome.success][:3]
    runner = Batches(ExpertPolicy, ScriptedUser)
    recovery = GuidedRecovery(config=RecoverConfig(sources=["correction"]), runner=runner)
    report, _ = recover_runs(failures, recovery, {}, batch=3)
    # correction from the decisive message (3 runs), from the start (runs not yet recovered,
    # if any), then intervene-and-replay (3 runs)
    assert runner.sizes[0] == 3 and runner.sizes[-1] == 3
    assert sum(len(r.attempts) for r in report.results) == sum(runner.sizes)


def test_a_failed_guidance_call_is_retried_then_recorded_and_the_search_goes_on(
    failed_run: Trajectory,
) -> None:
    refused = {"status": 400, "error": "context too long"}
    script = [refused, refused, refused, "", _plan_text(failed_run)]
    with MockOpenAIServer(script) as server:
        recovery = _llm_recovery(server.base_url, rounds=2)
        report, _ = recover_runs([failed_run], recovery, {failed_run.id: []})
        assert len(server.requests) == 5
    (result,) = report.results
    (failure,) = result.failed_calls
    assert failure.startswith("guidance writer: model call to http://127.0.0.1:")
    assert "context too long" in failure and "(after 3 attempts)" in failure
    assert report.failed_calls == 1
    assert result.recovered and result.source == "llm"
    assert [a.success for a in result.attempts if a.source == "llm"] == [True]


@pytest.fixture(scope="module")
def retail_library(shared_data: Path) -> list[Strategy]:
    """Strategies distilled from the real tau-bench retail runs of AgentRx."""
    from trajforge.importers.tau_bench import TauBenchImporter
    from trajforge.strategies.candidates import ContrastProposer
    from trajforge.strategies.distil import DistilConfig, distil

    path = shared_data / "agentrx/tau-retail/tau_dataset_full.json"
    runs = [t.with_id() for t in TauBenchImporter().read(path)]
    kept = distil(runs, [ContrastProposer()], DistilConfig(family="tau-retail")).kept()
    assert len(kept) >= 2
    return kept


def _plan_strategy(run: Trajectory) -> Strategy:
    """A strategy whose text the plan follower can carry out: the steps of the run's task."""
    from trajforge.schema import StrategyScope

    env = TauRetailEnv()
    env.reset(run.task)
    steps = "\n".join(f"call {a.name}({a.arguments})" for a in env.gold.actions)
    return Strategy(
        name="tau-retail/steps",
        text=f"{run.task.instruction} Steps, one a line:\n{steps}",
        scope=StrategyScope(environment="tau-retail"),
        source="llm",
    )


def test_retrieved_strategies_are_a_guidance_source(
    failed_run: Trajectory, retail_library: list[Strategy]
) -> None:
    from trajforge.strategies.retrieve import LexicalRetriever
    from trajforge.strategies.run import RetrievedStrategies

    library = [*retail_library, _plan_strategy(failed_run)]
    lookup = RetrievedStrategies(LexicalRetriever(library), k=3)
    config = RecoverConfig(sources=["strategies", "privileged"], starts=["start"])
    recovery = GuidedRecovery(PlanFollower, ScriptedUser, config, strategies=lookup)
    result, demo = recovery.recover(failed_run, None)
    assert result.recovered and result.source == "strategies" and not result.privileged
    assert [a.source for a in result.attempts] == ["strategies"]  # privileged never tried
    assert demo is not None and demo.outcome.success
    guidance = demo.metadata["recovery"]["guidance"]
    texts = lookup.texts(failed_run, 0)
    assert len(texts) == 3 and library[-1].text in texts  # the plan, and two distilled rules
    assert set(texts) - {library[-1].text} <= {s.text for s in retail_library}
    assert guidance == strategy_guidance(texts).text and guidance.startswith(STRATEGIES_INTRO)
    everything = " ".join(m.text() for m in demo.messages)
    assert STRATEGIES_INTRO not in everything and GUIDANCE_HEADER not in everything

    without = GuidedRecovery(PlanFollower, ScriptedUser, config)
    result, _ = without.recover(failed_run, None)
    assert result.unavailable == ["strategies"] and result.attempts[0].source == "privileged"


def test_recover_takes_the_strategies_source_from_the_store(
    shared_data: Path, tmp_path: Path
) -> None:
    db = tmp_path / "t.db"
    runs = shared_data / "tau-bench/historical_trajectories/gpt-4o-airline.json"
    runner = CliRunner(env={"TRAJFORGE_PROGRESS_EVERY": "0"})
    assert runner.invoke(app, ["import", str(runs), "--db", str(db)]).exit_code == 0
    args = ["recover", "--db", str(db), "--env", "tau-airline", "--teacher", "expert"]
    args += ["--limit", "2", "--source", "strategies", "--start", "start", "--no-intervene"]
    unasked = runner.invoke(app, args)
    assert unasked.exit_code == 1
    assert unasked.stderr.startswith("error: --source strategies needs --strategies K")
    empty = runner.invoke(app, [*args, "--strategies", "2"])
    assert empty.exit_code == 1 and "the store holds no strategies" in empty.stderr
    distil = ["strategies", "distil", "--family", "tau-airline", "--env", "tau-airline"]
    distilled = runner.invoke(app, [*distil, "--db", str(db)])
    assert distilled.exit_code == 0 and "stored 2 new strategy versions" in distilled.stdout
    result = runner.invoke(app, [*args, "--strategies", "2", "--json"])
    assert result.exit_code == 0, result.output
    report = orjson.loads(result.stdout)
    assert report["by_source"] == {"strategies": {"tried": 2, "recovered": 2}}
    demos = runner.invoke(app, ["ls", "--db", str(db), "--harness", "trajforge-recover", "--json"])
    assert demos.exit_code == 0 and demos.stdout.count('"trajforge-recover"') >= 2
