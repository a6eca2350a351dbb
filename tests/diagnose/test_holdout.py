"""Out-of-sample scoring: in-sample labels, baselines chosen on tuning data, priors."""

from __future__ import annotations

from trajforge.diagnose.calibrated import CalibratedLocalizer
from trajforge.diagnose.datasets import agent_key, dataset_of, same_agent
from trajforge.diagnose.holdout import HoldoutConfig, evaluate_holdout
from trajforge.diagnose.model import Diagnosis
from trajforge.diagnose.prior import PriorLocalizer
from trajforge.schema import Label, Message, Source, Task, Trajectory

CONFIG = HoldoutConfig(bootstrap=50)


def _run(task: str, step: int, agent: str, run: str = "Algorithm-Generated") -> Trajectory:
    names = ["Planner", "Coder", "Checker"]
    messages = [Message(role="user", content="question")] + [
        Message(role="assistant", name=names[i % 3], content=f"message {i}") for i in range(1, 12)
    ]
    return Trajectory(
        task=Task(id=task, environment="who-and-when"),
        source=Source(harness="captain-agent", run=run, format="who-and-when"),
        messages=messages,
        labels=[Label(message_index=step, agent=agent, source="human")],
    ).with_id()


class FixedStep:
    """A hand-tuned method that always answers step 2 (tuned on algorithm-generated)."""

    name = "fixed"
    tuned_on = frozenset({"who-and-when/algorithm-generated"})
    tuned_tasks: frozenset[str] = frozenset()

    def check(self, traj: Trajectory) -> None:
        return None

    def localize(self, traj: Trajectory) -> Diagnosis:
        return Diagnosis(trajectory_id=traj.id, method="heuristic", step=2, agent="coder")


def _diagnose(localizer, runs):
    return [localizer.localize(t) for t in runs]


def test_hand_tuned_method_on_its_tuning_data_is_labelled_in_sample() -> None:
    runs = [_run(f"a{i}", 2, "Coder") for i in range(6)]
    runs += [_run(f"h{i}", 4, "Checker", run="Hand-Crafted") for i in range(4)]
    report = evaluate_holdout(runs, FixedStep(), _diagnose, CONFIG)
    by_name = {item.dataset: item for item in report.datasets}
    tuned = by_name["who-and-when/algorithm-generated"]
    assert tuned.sample == "in-sample" and "in-sample" in tuned.split
    assert tuned.scores.exact.value == 1.0
    other = by_name["who-and-when/hand-crafted"]
    assert other.sample == "out-of-sample" and other.scores.exact.value == 0.0
    assert other.tuned_on == ["who-and-when/algorithm-generated"]


def test_baselines_are_chosen_on_the_tuning_side() -> None:
    # tuning dataset says step 2 / Coder; the tested dataset is all step 4 / Checker
    runs = [_run(f"a{i}", 2, "Coder") for i in range(6)]
    runs += [_run(f"h{i}", 4, "Checker", run="Hand-Crafted") for i in range(4)]
    config = HoldoutConfig(split="dataset", bootstrap=50)
    report = evaluate_holdout(runs, PriorLocalizer(), _diagnose, config)
    tested = next(d for d in report.datasets if d.dataset == "who-and-when/hand-crafted")
    assert tested.sample == "out-of-sample"
    assert tested.baselines.steps == [2] and tested.baselines.exact.value == 0.0
    assert tested.scores.exact.value == 0.0  # the prior was fitted elsewhere too
    assert tested.scores.exact.ci95 == [0.0, 0.0]


def test_task_folds_keep_every_run_of_a_task_out_of_its_tuning() -> None:
    runs = [_run(f"t{i % 5}", 1 + i % 5, "Planner") for i in range(10)]
    report = evaluate_holdout(runs, PriorLocalizer(), _diagnose, CONFIG)
    (item,) = report.datasets
    # each task's step is unique to it, so a prior that never saw the task misses it
    assert item.sample == "out-of-sample" and item.scores.exact.value == 0.0
    assert item.baselines.exact.value == 0.0


def test_calibrated_abstains_to_the_prior_when_the_base_is_worse() -> None:
    tuning = [_run(f"a{i}", 5, "Checker") for i in range(8)]
    fitted = CalibratedLocalizer(base=FixedStep()).fit(tuning)
    diagnosis = fitted.localize(_run("new", 5, "Checker"))
    assert diagnosis is not None and diagnosis.abstained
    assert (diagnosis.step, diagnosis.method, diagnosis.confidence) == (5, "calibrated", 1.0)
    good = CalibratedLocalizer(base=FixedStep()).fit([_run(f"b{i}", 2, "Coder") for i in range(8)])
    kept = good.localize(_run("new", 2, "Coder"))
    assert kept is not None and not kept.abstained and kept.confidence == 1.0


def test_agent_names_match_across_who_and_when_conventions() -> None:
    assert same_agent("Orchestrator (-> WebSurfer)", "Orchestrator")
    assert same_agent("Websurfer", "WebSurfer")
    assert same_agent("Orchestrator (thought)", "orchestrator")
    assert agent_key("Computer_terminal") == "computerterminal"
    assert not same_agent("WebSurfer", "Orchestrator") and not same_agent(None, "x")
    assert dataset_of(_run("x", 1, "a", run="Hand-Crafted-sample")).endswith("hand-crafted")


def test_calibrated_abstains_on_a_log_format_it_was_not_tuned_on() -> None:
    fitted = CalibratedLocalizer(base=FixedStep()).fit(
        [_run(f"b{i}", 2, "Coder") for i in range(8)]
    )
    other = Trajectory(
        task=Task(id="x", environment="household"),
        messages=[Message(role="user", content="go")]
        + [Message(role="assistant", content=f"step {i}") for i in range(5)],
        labels=[Label(message_index=2, source="oracle")],
    ).with_id()
    found = fitted.localize(other)
    assert found is not None and found.abstained and found.details["base_confidence"] == 0.0
