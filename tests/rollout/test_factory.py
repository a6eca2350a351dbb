"""One way from a name to agents and environments: `build` and `make_env`."""

from __future__ import annotations

import pytest

from trajforge.agents import POLICIES, ExpertPolicy, LLMPolicy, NoisyExpertPolicy
from trajforge.agents.base import EpisodeState, PolicyStep
from trajforge.agents.household_teacher import NoisyObservableTeacher
from trajforge.agents.replay import ReplayPolicy, ReplayUser
from trajforge.agents.spec import ForkPoint, PolicyOptions
from trajforge.agents.user_sim import LLMUser, ScriptedUser
from trajforge.envs import make_env
from trajforge.envs.base import EnvironmentBase
from trajforge.envs.household import HouseholdEnv
from trajforge.envs.tau import TauAirlineEnv
from trajforge.errors import UserError
from trajforge.rollout.factory import AgentSpec, build, choose_user
from trajforge.schema import Message, Task, Trajectory


class Seeded:
    """A policy made from its spec: records what it was given."""

    name = "seeded"

    def __init__(self, seed: int, error_rate: float) -> None:
        self.seed, self.error_rate = seed, error_rate

    @classmethod
    def from_spec(cls, options: PolicyOptions, seed: int, parent: ForkPoint | None) -> Seeded:
        return cls(seed, options.error_rate)

    def act(self, state: EpisodeState) -> PolicyStep:
        raise AssertionError("not run here")


def test_every_name_goes_through_the_registry() -> None:
    POLICIES.add("seeded-test", Seeded)
    policy = build(AgentSpec(policy="seeded-test", options=PolicyOptions(error_rate=0.4)), 7)
    assert isinstance(policy.policy, Seeded)
    assert (policy.policy.seed, policy.policy.error_rate) == (7, 0.4)
    assert isinstance(build("expert").policy, ExpertPolicy)
    noisy = build(AgentSpec(policy="noisy-expert", options=PolicyOptions(error_rate=0.3)), 5)
    assert isinstance(noisy.policy, NoisyExpertPolicy)
    assert (noisy.policy.config.seed, noisy.policy.config.error_rate) == (5, 0.3)
    path = build("trajforge.agents.expert:ExpertPolicy").policy
    assert isinstance(path, ExpertPolicy)


def test_the_noisy_household_teacher_is_made_from_its_spec() -> None:
    spec = AgentSpec(policy="noisy-household-teacher", options=PolicyOptions(error_rate=0.6))
    teacher = build(spec, 11).policy
    assert isinstance(teacher, NoisyObservableTeacher)
    assert (teacher.config.seed, teacher.config.error_rate) == (11, 0.6)
    direct = NoisyObservableTeacher(seed=11, error_rate=0.6)
    assert [teacher.rng.random() for _ in range(3)] == [direct.rng.random() for _ in range(3)]


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(UserError, match=r"unknown policy 'nope'; known: .*noisy-expert"):
        build("nope")


def test_llm_policy_and_user_from_the_options() -> None:
    options = PolicyOptions(base_url="http://127.0.0.1:9/v1", model="m", api_key="k")
    agents = build(AgentSpec(policy="llm", options=options, user="llm"))
    assert isinstance(agents.policy, LLMPolicy) and agents.policy.name == "llm:m"
    assert isinstance(agents.user, LLMUser)
    with pytest.raises(UserError, match="base URL and a model name"):
        build("llm")


def test_replay_needs_a_parent_and_brings_its_user() -> None:
    with pytest.raises(UserError, match="use it with fork"):
        build("replay")
    run = Trajectory(
        task=Task(id="t", environment="household"),
        messages=[Message(role="user", content="hi"), Message(role="assistant", content="ok")],
    )
    agents = build("replay", parent=ForkPoint(run, 1))
    assert isinstance(agents.policy, ReplayPolicy) and isinstance(agents.user, ReplayUser)


def test_the_scripted_user_only_where_the_environment_needs_one() -> None:
    assert build("expert").user is None
    assert isinstance(choose_user(None, [Message(role="system", content="s")]), ScriptedUser)
    assert choose_user(None, [Message(role="user", content="do it")]) is None
    given = ScriptedUser()
    assert choose_user(given, [Message(role="user", content="do it")]) is given


def test_make_env_by_name_or_recording() -> None:
    assert isinstance(make_env("household"), HouseholdEnv)
    recorded = Trajectory(
        task=Task(id="t", environment="tau-airline"),
        messages=[Message(role="tool", name="get_user_details", content='{"province": "ON"}')],
    )
    env = make_env(recorded)
    assert isinstance(env, TauAirlineEnv) and env.config.address_key == "province"
    with pytest.raises(UserError, match="environment 'none' cannot be replayed"):
        make_env(Trajectory(task=Task(id="t", environment="none"), messages=[]))


class NoOracleEnv(EnvironmentBase):
    """An environment without an oracle (only what `Environment` asks for)."""

    name = "no-oracle"

    @property
    def tools(self) -> list[dict]:
        return []

    def reset(self, task: Task) -> list[Message]:
        return [Message(role="user", content="hi")]

    def step(self, call):
        raise AssertionError("not run here")

    def evaluate(self):
        raise AssertionError("not run here")

    def snapshot(self) -> None:
        return None

    def restore(self, state) -> None:
        pass


def test_the_expert_names_an_environment_without_an_oracle() -> None:
    def state(env: object) -> EpisodeState:
        return EpisodeState(task=Task(id="t"), messages=[], tools=[], env=env, step=0)

    with pytest.raises(UserError, match="environment 'no-oracle' has no oracle"):
        ExpertPolicy().act(state(NoOracleEnv()))
    with pytest.raises(UserError, match="environment 'object' has no oracle"):
        ExpertPolicy().act(state(object()))
