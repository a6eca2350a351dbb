"""Guided recovery with a trained checkpoint as the teacher (`LockstepRunner`)."""

from __future__ import annotations

from pathlib import Path

from trajforge.agents.expert import ExpertPolicy
from trajforge.agents.household_teacher import ObservableTeacher
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.envs.household.env import SYSTEM_PROMPT
from trajforge.envs.household.tools import TOOLS
from trajforge.generate.guided import (
    GUIDANCE_HEADER,
    GuidedRecovery,
    Job,
    RecoverConfig,
    recover_runs,
    strip,
    with_guidance,
)
from trajforge.generate.guided.hinted import task_hint
from trajforge.generate.rows import chat_messages
from trajforge.rollout.episode import Limits, run_episode
from trajforge.serve.codec import GUIDANCE_HEADER as CODEC_HEADER
from trajforge.serve.codec import CompactCodec, words
from trajforge.serve.student import Student
from trajforge.train.guided import LockstepRunner


def _cut_short(seed: int, steps: int, policy=None):
    """A failed household run: the policy stopped after `steps` actions."""
    policy = policy or ObservableTeacher()
    task = task_for(seed, 1)
    return run_episode(HouseholdEnv(), policy, task, limits=Limits(max_steps=steps)).with_id()


def test_the_continuation_reads_the_guidance_in_its_system_message(student_dir: Path) -> None:
    failed = _cut_short(3, 2)
    hint = task_hint(HouseholdEnv(), failed.task)
    runner = LockstepRunner(Student(student_dir), max_steps=4)
    _, child = runner.start(Job(failed, 4, hint))
    assert child.messages[0].text() == f"{SYSTEM_PROMPT}\n\n{GUIDANCE_HEADER}\n{hint.text}"
    assert [m.text() for m in child.messages[1:]] == [m.text() for m in failed.messages[1:4]]
    assert child.parent.trajectory_id == failed.id and child.parent.message_index == 4
    _, opening = runner.start(Job(failed, 0, hint))  # from the start: the task's opening
    assert [m.role for m in opening.messages] == ["system", "user"]
    assert strip(child, hint, 4, {}).messages[0].text() == SYSTEM_PROMPT


def test_an_intervention_that_finishes_the_task_ends_the_continuation(student_dir: Path) -> None:
    whole = _cut_short(5, 20, ExpertPolicy())
    assert whole.outcome.success
    last = whole.assistant_indices()[-1]
    failed = whole.model_copy(update={"messages": whole.messages[:last], "id": ""}).with_id()
    runner = LockstepRunner(Student(student_dir), max_steps=4)
    (child,) = runner.run([Job(failed, last, first=whole.messages[last])])
    assert child.outcome.success and child.outcome.termination_reason == "env_done"
    assert len(child.messages) == last + 2  # the intervention and its answer, no model step


def test_guided_recovery_runs_end_to_end_with_a_trained_teacher(student_dir: Path) -> None:
    failures = [_cut_short(seed, 1) for seed in (1, 2, 3)]
    recovery = GuidedRecovery(
        runner=LockstepRunner(Student(student_dir), max_steps=6),
        config=RecoverConfig(
            sources=["correction", "privileged"], privileged_forms=["hint"], max_steps=6
        ),
    )
    report, demos = recover_runs(failures, recovery, {})
    assert report.failures == 3 and len(report.results) == 3
    for result in report.results:
        hinted = [a for a in result.attempts if a.source == "privileged"]
        assert hinted or result.recovered  # the hint was tried unless a correction won first
    assert report.recovered == len(demos)
    for demo in demos:
        provenance = demo.metadata["recovery"]
        assert provenance["source"] in ("correction", "privileged")
        assert not any(provenance["guidance"] in m.text() for m in demo.messages)
        assert demo.messages[0].text() == SYSTEM_PROMPT


def test_the_compact_codec_reads_guidance_and_still_drops_the_system_prompt() -> None:
    env = HouseholdEnv()
    task = task_for(3, 1)
    opening = chat_messages(env.reset(task))
    hint = task_hint(HouseholdEnv(), task)
    guided = chat_messages(with_guidance(env.reset(task), hint))
    codec = CompactCodec.build([(guided, TOOLS)])
    plain_ids = codec.prompt(opening, TOOLS)
    guided_ids = codec.prompt(guided, TOOLS)
    assert codec.pieces(plain_ids)[0] == "<|user|>"  # no system turn without guidance
    shown = codec.pieces(guided_ids[: len(guided_ids) - len(plain_ids)])
    assert shown[0] == "<|system|>" and "<|unk|>" not in shown
    assert " ".join(shown[1:-1]) == " ".join(words(hint.text))
    assert guided_ids[-len(plain_ids) :] == plain_ids
    assert CODEC_HEADER == GUIDANCE_HEADER
