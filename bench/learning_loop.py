"""The learning lab: what does each kind of trajforge data do to a student?

    python bench/learning_loop.py [--quick] [--seeds 3] [--steps 1200] [--jobs 2] [--arms E,O]
                                  [--train-worlds 400] [--hidden 256] [--heads 8]
                                  [--student tiny|smollm2-135m] [--lr LR] [--work DIR]
                                  [--resume PARTIAL] [--report PARTIAL]
                                  [--out bench/results/learning_loop.json]

Students (the `tiny` preset: a ~2.7M-parameter Llama-style model, 256 wide with 8 heads and
4 layers, trained from scratch with a word-level vocabulary; or, with `--student
smollm2-135m`, SmolLM2-135M-Instruct fine-tuned with LoRA rank 16 under bf16 autocast where
the CPU has bf16 units and in fp32 elsewhere (`--resume` does not mix the two), results in
`learning_loop_smollm2-135m.json`) are trained at equal steps on household difficulty-1 data,
one arm per kind of data, each with several seeds:

- E:   the observable teacher's successes on the training worlds;
- E+R: plus recovery demonstrations from teacher failures (a noisy teacher's run forked at its
       first mistake, the clean teacher continuing; the mistake in context, masked from loss);
- E+S: plus corrections of the student's own failures (the E student of the same seed rolled
       out on the training worlds; each failed run forked at the first step where the teacher
       would have acted otherwise; the teacher continuing; a DAgger-style second round);
- E+DPO: the E student trained further with DPO (`trajforge.train.dpo`) on preference pairs
       from the same noisy-teacher runs: at each first mistake, the clean teacher's action of
       a successful fork there is chosen over the mistake, plus the sibling pairs where a
       failing noisy run parts from the clean teacher's passing run; equal steps with E+R:
       SFT on E's rows for `dpo_share` less of the steps, then DPO for the rest, half a
       batch of pairs a step (as many sequences as a batch of the other arms);
- O:   the privileged oracle's demonstrations on the same worlds (the cautionary control);
- T:   a guided teacher's successes on the training worlds. The teacher is a student of the
       same size and budget trained on the observable teacher's runs (no hint) plus the
       oracle's runs with the world's hidden-state hint in the system prompt ("Hidden from
       you: mug 1 is in cabinet 2 (kitchen)."), so it searches without a hint and reads one
       when given; it is trained once per lab configuration and shared by every seed (cached
       under the work dir);
- T+P: plus the teacher's failures on the training worlds recovered by guided recovery
       (`trajforge.generate.guided`: the verified correction as advice, then the privileged
       hint, from the decisive message and from the start; the teacher in lock-step with the
       guidance in its system prompt), guidance stripped, leak-checked, the failed prefix
       masked from the loss. The teacher's own figures (unguided success, recovery by
       guidance source, intervene-and-replay, leak rejections, and a held-out check of
       reading the hint) are in the arm's results under "teacher".

Every student is evaluated greedily (at most 20 steps) on held-out worlds (seeds from
`HELD_OUT_START`, disjoint from every training seed; `check_held_out` enforces it against the
checkpoint's own list of training tasks) and on recovery from perturbed states (a teacher
prefix of random length, then one injected wrong move). Arms are a list: `ARMS.append(Arm(...))`
adds one (its rows function sees the lab and the seed; `needs` names arms it builds on).
Each (arm, seed) runs in its own worker process (`--jobs` at once) on one CPU thread. The
JSON result records the command. Finished (arm, seed) results are saved to
`<out>.partial.json` as they come; `--resume` starts from such a file and runs only what is
missing (for example arms added later), and the result then records every command that
contributed. A worker that dies (the out-of-memory killer, a kill) costs only its own job:
the jobs of the broken pool run again one at a time, and a job whose worker dies twice
alone is left out of the run (and out of the partial file, for `--resume`).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import random
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from trajforge.agents.expert import ExpertPolicy
from trajforge.agents.household_teacher import NoisyObservableTeacher, ObservableTeacher
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.generate.guided import GuidedRecovery, RecoverConfig, recover_runs, with_guidance
from trajforge.generate.guided.guidance import hidden_state_guidance
from trajforge.generate.guided.hinted import hinted_run
from trajforge.generate.guided.report import summarize as summarize_recovery
from trajforge.generate.guided.search import RecoveryResult
from trajforge.generate.pairs import fork_pair, sibling_pairs
from trajforge.generate.recovery import (
    first_disagreement,
    first_labelled_error,
    household_rows,
    recovery_rows,
)
from trajforge.progress import ProgressLines
from trajforge.rollout.episode import Limits, run_episode
from trajforge.schema import Trajectory
from trajforge.serve.precision import cpu_has_bf16
from trajforge.serve.student import Student
from trajforge.train.dpo import DPOConfig, train_dpo
from trajforge.train.evaluate import (
    check_held_out,
    fresh_starts,
    held_out_tasks,
    rate,
    recovery_starts,
    run_lockstep,
    wilson,
)
from trajforge.train.guided import LockstepRunner
from trajforge.train.rows import preference_pairs, sequences
from trajforge.train.sft import (
    Progress,
    SFTConfig,
    StepDone,
    checked_rows,
    data_fingerprint,
    train_sft,
)

Row = tuple[list[dict], list[dict]]
RESULTS = Path(__file__).parent / "results" / "learning_loop.json"


@dataclass
class LabConfig:
    train_worlds: int = 400
    test_worlds: int = 300
    recovery_states: int = 300
    steps: int = 1200
    batch_size: int = 16
    lr: float = 1e-3
    hidden: int = 256
    heads: int = 8
    """The base student's shape, twice the old width at the same head size (32): both fit
    every training world, and on 200 validation worlds E at 256 x 8 succeeds in 0.53 of them
    against 0.25 at 128 x 4 (2 seeds each, `bench/results/lab_base.json`)."""
    layers: int = 4
    max_steps: int = 20
    noise: float = 0.2
    difficulty: int = 1
    teacher_failures: int = 150
    teacher_steps: int | None = None
    dpo_share: float = 0.25
    dpo_beta: float = 0.1
    dpo_lr: float = 2e-4
    work: str = "/tmp/learning_loop"
    student: str = "tiny"
    lora_rank: int = 0
    max_context: int = 1024
    max_new_tokens: int = 16
    bf16: bool = False
    """bf16 autocast in training and bf16 weights in rollouts: a pretrained student's, where
    the CPU has bf16 units (without them bf16 is about 17 times slower than fp32)."""


PRETRAINED = {"lr": 1e-3, "steps": 64, "lora_rank": 16, "max_new_tokens": 48, "batch_size": 4}
"""A pretrained `--student` (LoRA; a tool call in its text convention takes ~30 tokens). The
learning rate is the better of 2e-4 and 1e-3 in `learning_loop_smollm2-135m_lr_probe.json`
(E at 64 steps: 1/8 and 5/8 of the first held-out worlds)."""
PRETRAINED_QUICK = {
    "steps": 4,
    "teacher_steps": 4,
    "batch_size": 2,
    "test_worlds": 4,
    "recovery_states": 4,
}
"""`--quick` with a pretrained `--student`: a smoke run of the whole path, not a result."""


def _student(config: LabConfig, checkpoint: Path) -> Student:
    """A trained student to roll out (with bfloat16 weights where it trained under bf16
    autocast)."""
    return Student(checkpoint, bf16=config.bf16)


def _lockstep(student: Student, starts, config: LabConfig, label: str = "") -> list:
    """Every start played to its end in lock-step; with a `label`, throttled progress lines
    (a pretrained student plays a few hundred episodes in an hour)."""
    if not label:
        return run_lockstep(student, starts, config.max_steps, max_new_tokens=config.max_new_tokens)
    shown = ProgressLines(label, len(starts), "episode")
    return run_lockstep(
        student, starts, config.max_steps, max_new_tokens=config.max_new_tokens,
        on_finished=lambda _: shown.advance(),
        on_round=lambda step, running: shown.update(shown.done, step=step, running=running),
    )  # fmt: skip


class Lab:
    """Shared data of one seed's worker: training worlds, teacher rows, trained students."""

    def __init__(self, config: LabConfig) -> None:
        self.config = config
        self.tasks = [task_for(seed, config.difficulty) for seed in range(config.train_worlds)]
        self._cache: dict[str, list[dict]] = {}
        self.details: dict[str, Any] = {}
        """What an arm's rows function wants in the arm's result besides the evaluation."""

    def demos(self, policy_name: str) -> list[dict]:
        """Successful runs of a deterministic policy on every training world."""
        if policy_name not in self._cache:
            policy = {"teacher": ObservableTeacher, "oracle": ExpertPolicy}[policy_name]()
            runs = [self._run(policy, task) for task in self.tasks]
            self._cache[policy_name] = [
                row for t in runs if t.outcome.success for row in household_rows(t)
            ]
        return self._cache[policy_name]

    def first_demos(self, worlds: int) -> list[dict]:
        """The observable teacher's successes on the first `worlds` training worlds."""
        ids = {task.id for task in self.tasks[:worlds]}
        return [row for row in self.demos("teacher") if row["task_id"] in ids]

    def _run(self, policy, task):
        return run_episode(
            HouseholdEnv(), policy, task, limits=Limits(max_steps=self.config.max_steps)
        )

    def noisy_runs(self, seed: int) -> list[Trajectory]:
        """The noisy teacher's run of every training world (the same runs for E+R and E+DPO)."""
        runs = []
        for index, task in enumerate(self.tasks):
            noisy = NoisyObservableTeacher(
                seed=seed * 100_003 + index, error_rate=self.config.noise
            )
            runs.append(self._run(noisy, task))
        return runs

    def teacher_recoveries(self, seed: int) -> list[dict]:
        """Recovery demonstrations from the noisy teacher's runs (first mistake of each)."""
        runs = self.noisy_runs(seed)
        forks = [(run, e) for run in runs if (e := first_labelled_error(run)) is not None]
        return recovery_rows(HouseholdEnv, forks, ObservableTeacher(), self.config.max_steps, "R")

    def teacher_pairs(self, seed: int) -> list[dict]:
        """Preference pairs from the noisy teacher's runs: at each first mistake, the clean
        teacher's action from a successful fork there over the mistake (`fork_pair`), and
        where a failing noisy run parts from the clean teacher's passing run of its world
        (`sibling_pairs`); one pair per (run, step, chosen action)."""
        runs = self.noisy_runs(seed)
        teacher, steps = ObservableTeacher(), self.config.max_steps
        pairs = [
            pair
            for run in runs
            if (error := first_labelled_error(run)) is not None
            and (pair := fork_pair(HouseholdEnv, run, error, teacher, steps)) is not None
        ]
        pairs += sibling_pairs(runs + [self._run(teacher, task) for task in self.tasks])
        unique = {(p["run_id"], p["prompt_end"], orjson.dumps(p["chosen"])): p for p in pairs}
        self.details["pairs_by_method"] = _methods(unique.values())
        return list(unique.values())

    def student_recoveries(self, seed: int) -> list[dict]:
        """Corrections of the E student's own failed runs on the training worlds."""
        student = _student(self.config, checkpoint_dir(self.config, "E", seed))
        runs = _lockstep(student, fresh_starts(HouseholdEnv, self.tasks), self.config)
        teacher = ObservableTeacher()
        forks = []
        for run in runs:
            if not run.outcome.success:
                error = first_disagreement(HouseholdEnv, run, teacher)
                if error is not None:
                    forks.append((run, error))
        return recovery_rows(HouseholdEnv, forks, teacher, self.config.max_steps, "S")

    def hinted_demos(self) -> list[dict]:
        """The oracle's successes with the world's hidden-state hint in the system prompt."""
        runs = [
            hinted_run(HouseholdEnv, ExpertPolicy(), task, self.config.max_steps)
            for task in self.tasks
        ]
        return [row for run in runs if run is not None for row in household_rows(run, kind="H")]

    def guided_teacher(self, *kinds: str) -> list[dict]:
        """The guided teacher's rows of `kinds` ("T": its successes, "P": its recovered
        failures); its figures go into the arm's result. Made once per lab configuration
        (under a lock: seeds run in parallel) and cached in the work dir."""
        folder = teacher_dir(self.config)
        cache = folder / "teacher.json"
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / "lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = _kept(cache, lambda: self._make_guided_teacher(folder))
        self.details["teacher"] = data["figures"]
        return [row for kind in kinds for row in data[kind]]

    def _make_guided_teacher(self, folder: Path) -> dict[str, Any]:
        """Trained, run on the training worlds and searched in stages, each stage's output
        kept in `folder` so a killed lab goes on from the last finished stage."""
        config = self.config
        rows = self.demos("teacher") + self.hinted_demos()
        out = folder / "checkpoint"
        if not (out / "trajforge.json").is_file():  # written last: the teacher is trained
            train_rows(config, rows, out, "guided-teacher", 0, config.teacher_steps)
        student = _student(config, out)
        runs = self._teacher_runs(student, folder)
        failures = [t for t in runs if not t.outcome.success]
        searched = failures[: config.teacher_failures]
        results, demos = self._teacher_recoveries(student, searched, folder)
        report = summarize_recovery(results)
        figures = {
            "training_rows": _kinds(rows),
            "unguided_success_train_worlds_in_sample": rate(
                [bool(t.outcome.success) for t in runs]
            ),
            "failures": len(failures),
            "searched": len(searched),
            "recovery": report.model_dump(exclude={"results"}),
            "demos_holding_guidance": sum(_holds_guidance(demo) for demo in demos),
            "hint_check_held_out": hint_check(student, config),
        }
        return {
            "T": [row for t in runs if t.outcome.success for row in household_rows(t, kind="T")],
            "P": [row for demo in demos for row in _recovered_rows(demo)],
            "figures": figures,
        }

    def _teacher_runs(self, student: Student, folder: Path) -> list[Trajectory]:
        """The guided teacher's unguided run of every training world, 100 worlds a stage."""
        runs: list[Trajectory] = []
        for first in range(0, len(self.tasks), TEACHER_RUN_STAGE):
            tasks = self.tasks[first : first + TEACHER_RUN_STAGE]

            def play(tasks: list = tasks, first: int = first) -> list[Any]:
                label = f"guided teacher: training worlds {first + 1}-{first + len(tasks)}"
                played = _lockstep(student, fresh_starts(HouseholdEnv, tasks), self.config, label)
                return [t.with_id().model_dump(mode="json") for t in played]

            stage = _kept(folder / f"runs-{first}.json", play)
            runs += [Trajectory.model_validate(t) for t in stage]
        return runs

    def _teacher_recoveries(
        self, student: Student, failures: list[Trajectory], folder: Path
    ) -> tuple[list[RecoveryResult], list[Trajectory]]:
        """The guided search over `failures`, a few runs a stage."""
        config = self.config
        recovery = GuidedRecovery(
            runner=LockstepRunner(student, config.max_steps, config.max_new_tokens),
            config=RecoverConfig(
                sources=["correction", "privileged"],
                privileged_forms=["hint"],
                max_steps=config.max_steps,
            ),
        )
        results: list[RecoveryResult] = []
        demos: list[Trajectory] = []
        for first in range(0, len(failures), TEACHER_SEARCH_STAGE):
            chunk = failures[first : first + TEACHER_SEARCH_STAGE]

            def search(chunk: list[Trajectory] = chunk, first: int = first) -> dict[str, Any]:
                print(
                    f"guided teacher: searching failures {first + 1}-{first + len(chunk)}"
                    f" of {len(failures)}",
                    file=sys.stderr,
                    flush=True,
                )
                report, found = recover_runs(chunk, recovery, {}, batch=len(chunk))
                return {
                    "results": [r.model_dump(mode="json") for r in report.results],
                    "demos": [d.model_dump(mode="json") for d in found],
                }

            stage = _kept(folder / f"search-{first}.json", search)
            results += [RecoveryResult.model_validate(r) for r in stage["results"]]
            demos += [Trajectory.model_validate(d) for d in stage["demos"]]
        return results, demos


def _kept(path: Path, make: Callable[[], Any]) -> Any:
    """`make()`'s JSON output, kept at `path` (written whole, then renamed) and read back
    from there when the stage ran before."""
    if not path.is_file():
        staged = path.with_suffix(".partial")
        staged.write_bytes(orjson.dumps(make()))
        staged.replace(path)
    return orjson.loads(path.read_bytes())


def teacher_dir(config: LabConfig) -> Path:
    """Where the guided teacher of this lab configuration is kept (shared by seeds)."""
    keys = (
        *("train_worlds", "steps", "teacher_steps", "batch_size", "lr", "hidden", "heads"),
        *("layers", "max_steps", "difficulty", "teacher_failures"),
    )
    key = orjson.dumps({k: getattr(config, k) for k in keys}, option=orjson.OPT_SORT_KEYS)
    return Path(config.work) / f"guided-teacher-{hashlib.sha256(key).hexdigest()[:10]}"


def hint_check(student: Student, config: LabConfig) -> dict[str, Any]:
    """The teacher on held-out worlds without a hint and with the start state's hint in its
    system prompt: does it act on the hint?"""
    tasks = held_out_tasks(HouseholdEnv(), max(10, config.test_worlds // 3), config.difficulty)
    check_held_out([t.id for t in tasks], student.manifest["train_tasks"])
    plain = _lockstep(student, fresh_starts(HouseholdEnv, tasks), config)
    hinted = fresh_starts(HouseholdEnv, tasks)
    for env, traj in hinted:
        traj.messages = with_guidance(traj.messages, hidden_state_guidance(env))
    guided = _lockstep(student, hinted, config)
    return {
        "worlds": len(tasks),
        "without_hint": rate([bool(t.outcome.success) for t in plain]),
        "with_hint": rate([bool(t.outcome.success) for t in guided]),
    }


def _recovered_rows(demo) -> list[dict]:
    """A recovered demonstration's rows: the failed run's prefix is context only."""
    at = demo.metadata["recovery"]["at"]
    masked = [i for i in demo.assistant_indices() if i < at]
    return household_rows(demo, masked=masked, kind="P")


def _holds_guidance(demo) -> bool:
    text = demo.metadata["recovery"]["guidance"]
    return any(text in (m.text() or "") for m in demo.messages)


def checkpoint_dir(config: LabConfig, arm: str, seed: int) -> Path:
    return Path(config.work) / f"{arm}-seed{seed}"


def train_rows(
    config: LabConfig,
    rows: list[dict],
    out: Path,
    name: str,
    seed: int,
    steps: int | None = None,
    progress: Progress | None = None,
) -> Path:
    """A student of the lab's size and budget (`steps`: the lab's) trained on `rows`; a line
    every tenth of the steps unless `progress` is given."""
    steps = steps or config.steps
    sft = SFTConfig(
        model=config.student,
        lora_rank=config.lora_rank,
        bf16=config.bf16,
        max_context=config.max_context,
        steps=steps,
        batch_size=config.batch_size,
        lr=config.lr,
        warmup=min(50, steps // 5),
        seed=seed,
        save_every=steps,
        hidden=config.hidden,
        heads=config.heads,
        layers=config.layers,
        threads=1,
    )
    tasks = sorted({row["task_id"] for row in rows})
    manifest = {"name": name, "train_tasks": tasks}
    chats = sequences(rows)
    if not _trained_already(out, sft, chats):
        train_sft(chats, out, sft, manifest=manifest, progress=progress or step_lines(name))
    return out


def step_lines(name: str) -> Progress:
    """Progress that prints `name`'s step, loss and elapsed time every tenth of its steps."""
    started = time.time()

    def line(done: StepDone) -> None:
        if done.step % max(1, done.steps // 10) == 0 or done.step == done.steps:
            elapsed = time.time() - started
            print(
                f"{name}: step {done.step}/{done.steps} loss {done.loss:.4f} ({elapsed:.0f}s)",
                flush=True,
            )

    return line


def _trained_already(out: Path, sft: SFTConfig, chats: list) -> bool:
    """Whether `out` holds a finished checkpoint of this configuration on these rows (an
    interrupted lab keeps the students it had trained)."""
    path = out / "trajforge.json"
    if not path.is_file():
        return False
    manifest = orjson.loads(path.read_bytes())
    return (
        manifest.get("step") == sft.steps
        and manifest.get("config") == sft.model_dump()
        and manifest.get("data_sha256") == data_fingerprint(checked_rows(chats))
    )


def dpo_steps(config: LabConfig) -> int:
    """The share of the lab's steps that E+DPO spends on preference pairs."""
    return max(1, round(config.steps * config.dpo_share))


def sft_then_dpo(config: LabConfig, rows: list[dict], out: Path, name: str, seed: int) -> Path:
    """The E student trained for the lab's steps less `dpo_steps` on the rows that are not
    pairs, then DPO for `dpo_steps` on the pairs (batch_size / 2 pairs a step: as many
    sequences a step as the other arms' batches), so the total steps equal every arm's."""
    pairs = [row for row in rows if row["form"] == "preference"]
    demos = [row for row in rows if row["form"] != "preference"]
    tuning = dpo_steps(config)
    start = out.with_name(out.name + "-sft")
    train_rows(config, demos, start, f"{name}-sft", seed, steps=config.steps - tuning)
    dpo = DPOConfig(
        steps=tuning,
        batch_size=max(1, config.batch_size // 2),
        beta=config.dpo_beta,
        lr=config.dpo_lr,
        warmup=min(10, tuning // 5),
        seed=seed,
        threads=1,
    )
    tasks = sorted({row["task_id"] for row in pairs})
    train_dpo(
        preference_pairs(pairs), start, out, dpo, manifest={"name": name, "pair_tasks": tasks}
    )
    return out


@dataclass
class Arm:
    name: str
    about: str
    rows: Callable[[Lab, int], list[dict]]
    needs: tuple[str, ...] = ()
    adds_to: str = "E"
    """The arm whose data this one extends, or whose budget it matches with other data:
    paired differences are taken against E and it."""
    train: Callable[[LabConfig, list[dict], Path, str, int], Path] = train_rows
    """How the arm's student is trained on its rows."""
    guided: bool = False
    """Its rows come from the guided teacher, made once for every seed by the first such arm
    to start."""


ARMS: list[Arm] = [
    Arm("E", "observable-teacher successes", lambda lab, seed: lab.demos("teacher")),
    Arm(
        "E+R",
        "plus recovery demonstrations from noisy-teacher failures",
        lambda lab, seed: lab.demos("teacher") + lab.teacher_recoveries(seed),
    ),
    Arm(
        "E+S",
        "plus corrections of the E student's own failures",
        lambda lab, seed: lab.demos("teacher") + lab.student_recoveries(seed),
        needs=("E",),
    ),
    Arm(
        "E+DPO",
        "the E student (trained on the E rows for all but dpo_share of the steps) trained "
        "further with DPO on preference pairs from the noisy teacher's runs (fork and "
        "sibling pairs at its mistakes), at E+R's total steps",
        lambda lab, seed: lab.demos("teacher") + lab.teacher_pairs(seed),
        train=sft_then_dpo,
        adds_to="E+R",
    ),
    Arm("O", "privileged-oracle demonstrations", lambda lab, seed: lab.demos("oracle")),
    Arm(
        "T",
        "a guided teacher's successes (the teacher: a student trained on observable-teacher "
        "runs and on oracle runs with a where-things-are hint in the system prompt)",
        lambda lab, seed: lab.guided_teacher("T"),
        guided=True,
    ),
    Arm(
        "T+P",
        "plus the guided teacher's failures recovered with guidance (correction, privileged "
        "hint), guidance stripped",
        lambda lab, seed: lab.guided_teacher("T", "P"),
        adds_to="T",
        guided=True,
    ),
]

CURVE_WORLDS = (50, 100, 200)
TEACHER_RUN_STAGE = 100
"""Training worlds the guided teacher plays per kept stage."""
TEACHER_SEARCH_STAGE = 10
"""Failed runs searched per kept stage (one lock-step batch)."""
"""The sample-efficiency curve: E's budget on the demonstrations of fewer worlds (E itself is
the point at `train_worlds`)."""
ARMS += [
    Arm(
        f"E@{worlds}",
        f"E's rows of the first {worlds} training worlds only, at E's steps",
        lambda lab, seed, worlds=worlds: lab.first_demos(worlds),
    )
    for worlds in CURVE_WORLDS
]


def _train(lab: Lab, arm: Arm, seed: int, rows: list[dict]) -> Path:
    out = checkpoint_dir(lab.config, arm.name, seed)
    return arm.train(lab.config, rows, out, f"{arm.name}-seed{seed}", seed)


def _evaluate(lab: Lab, checkpoint: Path) -> dict[str, Any]:
    config = lab.config
    student = _student(config, checkpoint)
    env = HouseholdEnv()
    tests = held_out_tasks(env, config.test_worlds, config.difficulty)
    recovery_tasks = held_out_tasks(env, config.recovery_states + 40, config.difficulty, 500_000)
    trained_on = student.manifest["train_tasks"]
    check_held_out([t.id for t in tests + recovery_tasks], trained_on)
    plain = fresh_starts(HouseholdEnv, tests)
    starts = recovery_starts(HouseholdEnv, recovery_tasks, ObservableTeacher(), seed=7)
    both = _lockstep(student, plain + starts[: config.recovery_states], config, "evaluation")
    runs, recovered = both[: len(plain)], both[len(plain) :]  # one lock-step, fewer rounds
    return {
        "success": [bool(t.outcome.success) for t in runs],
        "recovery": [bool(t.outcome.success) for t in recovered],
        "test_tasks": [t.id for t in tests],
        "recovery_tasks": [t.task.id for t in recovered],
    }


def run_arm(config: LabConfig, seed: int, name: str) -> dict[str, Any]:
    """Train and evaluate one arm for one seed (one worker process, one CPU thread)."""
    import torch

    torch.set_num_threads(1)
    lab = Lab(config)
    arm = next(a for a in ARMS if a.name == name)
    started = time.time()
    rows = arm.rows(lab, seed)
    if not rows:  # a guided teacher that solved and recovered nothing gives T no rows
        print(f"seed {seed} {name}: no training rows, not trained", flush=True)
        return {"rows": 0, "not_trained": "the arm's data has no rows", **lab.details}
    checkpoint = _train(lab, arm, seed, rows)
    trained = time.time()
    evaluation = _evaluate(lab, checkpoint)
    lines = (checkpoint / "loss.jsonl").read_bytes().splitlines()
    curve = [orjson.loads(line) for line in lines]
    result = {
        "rows": len(rows),
        "rows_by_kind": _kinds(rows),
        "loss_curve": [[r["step"], r["loss"]] for r in curve[:: max(1, len(curve) // 60)]],
        "final_loss": statistics.fmean(r["loss"] for r in curve[-20:]),
        "train_s": round(trained - started, 1),
        "eval_s": round(time.time() - trained, 1),
        "bf16": config.bf16,
        **evaluation,
        **lab.details,
    }
    print(
        f"seed {seed} {name}: rows {len(rows)} success "
        f"{sum(evaluation['success'])}/{len(evaluation['success'])} recovery "
        f"{sum(evaluation['recovery'])}/{len(evaluation['recovery'])} "
        f"({time.time() - started:.0f}s)",
        flush=True,
    )
    return result


def run_all(
    config: LabConfig,
    seeds: list[int],
    names: list[str],
    jobs: int,
    partial: Path,
    done: dict[int, dict[str, Any]],
    commands: list[str],
) -> dict:
    """Every (arm, seed) not in `done`, `jobs` at a time in a process pool; an arm starts once
    the arms it needs are done, and while one arm is making the guided teacher no other arm
    of the teacher's takes a worker to wait for it.

    A worker that dies (the kernel's out-of-memory killer, a kill) breaks the pool and every
    job it ran. Those jobs run again, one at a time, so the one whose worker dies is known
    (the students they had finished are kept); a job whose worker died `LOST_LIMIT` times
    running alone is left out: the result says it is incomplete and `--resume` runs it."""
    results: dict[int, dict[str, Any]] = {seed: dict(done.get(seed, {})) for seed in seeds}
    pending = [(seed, name) for seed in seeds for name in names if name not in results[seed]]
    pending.sort(key=lambda job: "@" in job[1])  # every seed's main arms before the curve
    run = Pool(config, results, partial, commands)
    suspects: set[tuple[int, str]] = set()
    losses: dict[tuple[int, str], int] = {}
    while pending:
        if not suspects:
            lost = run.jobs(pending, max(1, jobs))
        else:
            pending.sort(key=lambda job: job not in suspects)
            lost = run.jobs(pending, 1, until=lambda held=suspects: not held.intersection(pending))
        if len(lost) == 1:
            losses[lost[0]] = losses.get(lost[0], 0) + 1
        suspects = set(lost) if lost else set()
        for job in [job for job in lost if losses.get(job, 0) >= LOST_LIMIT]:
            print(f"seed {job[0]} {job[1]}: its worker died {LOST_LIMIT} times; left out")
            lost.remove(job)
        pending[:0] = lost
        if pending and not lost and next_job(pending, results, {}, config) is None:
            shown = ", ".join(f"seed {seed} {name}" for seed, name in pending)
            print(f"cannot start (an arm they need is missing): {shown}", flush=True)
            break
    return results


LOST_LIMIT = 2
"""Times a job's worker may die, running alone, before the job is left out of the run."""


@dataclass
class Pool:
    """Runs lab jobs in a process pool, saving each result to the partial file."""

    config: LabConfig
    results: dict[int, dict[str, Any]]
    partial: Path
    commands: list[str]

    def jobs(self, pending: list, width: int, until=lambda: False) -> list[tuple[int, str]]:
        """Run `pending` jobs (taken from the list as they start), `width` at once, until none
        can start, `until()` holds between jobs, or a worker dies: then the jobs it ran."""
        running: dict[Any, tuple[int, str]] = {}
        with ProcessPoolExecutor(max_workers=width) as pool:
            while not (until() and not running):
                while len(running) < width and (
                    job := next_job(pending, self.results, running, self.config)
                ):
                    pending.remove(job)
                    running[pool.submit(run_arm, self.config, *job)] = job
                if not running:  # every job done, or none can start
                    break
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    seed, name = running.pop(future)
                    try:
                        self.results[seed][name] = future.result()
                    except BrokenProcessPool:
                        lost = [(seed, name), *running.values()]
                        shown = ", ".join(f"seed {s} {n}" for s, n in lost)
                        print(f"a worker died; these run again, one at a time: {shown}")
                        return lost
                    self._save()
        return []

    def _save(self) -> None:
        saved = {"commands": self.commands, **self.results}
        self.partial.write_bytes(orjson.dumps(saved, option=orjson.OPT_NON_STR_KEYS))


def next_job(pending, results, running, config: LabConfig) -> tuple[int, str] | None:
    """The first pending (seed, arm) that can start now, if any."""
    arms = {arm.name: arm for arm in ARMS}
    teacher_made = (teacher_dir(config) / "teacher.json").is_file()
    making_teacher = not teacher_made and any(arms[n].guided for _, n in running.values())
    for seed, name in pending:
        needs_met = all(need in results[seed] for need in arms[name].needs)
        if needs_met and not (arms[name].guided and making_teacher):
            return seed, name
    return None


def _methods(pairs) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pair in pairs:
        counts[pair["method"]] = counts.get(pair["method"], 0) + 1
    return counts


def _kinds(rows: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["kind"]] = counts.get(row["kind"], 0) + 1
    return counts


def summarize(per_seed: dict[int, dict[str, Any]], arm_names: list[str]) -> dict[str, Any]:
    arms = {}
    for name in arm_names:
        recorded = [per_seed[s][name] for s in sorted(per_seed) if name in per_seed[s]]
        runs = [r for r in recorded if "success" in r]
        if len(runs) < len(recorded):
            arms[name] = {"not_trained_seeds": len(recorded) - len(runs)}
            if "teacher" in recorded[0]:
                arms[name]["teacher"] = recorded[0]["teacher"]
        if not runs:
            continue
        success = [x for r in runs for x in r["success"]]
        recovery = [x for r in runs for x in r["recovery"]]
        arms[name] = {
            **arms.get(name, {}),
            "success": rate(success)["rate"],
            "success_ci": list(wilson(sum(success), len(success))),
            "recovery": rate(recovery)["rate"],
            "recovery_ci": list(wilson(sum(recovery), len(recovery))),
            "success_by_seed": [rate(r["success"])["rate"] for r in runs],
            "recovery_by_seed": [rate(r["recovery"])["rate"] for r in runs],
            "rows_by_seed": [r["rows"] for r in runs],
            "final_loss_by_seed": [round(r["final_loss"], 4) for r in runs],
        }
        if "teacher" in runs[0]:  # the guided teacher is shared by every seed
            arms[name]["teacher"] = runs[0]["teacher"]
    adds_to = {arm.name: arm.adds_to for arm in ARMS}
    trained = {name for name, arm in arms.items() if "success" in arm}
    for name in trained:
        for base in sorted({"E", adds_to.get(name, "E")} & trained - {name}):
            arms[name][f"vs_{base}"] = {
                key: paired_difference(per_seed, name, base, key) for key in ("success", "recovery")
            }
    return arms


def paired_difference(per_seed, arm: str, base: str, key: str, draws: int = 2000) -> dict:
    """Mean difference over seeds, 95% bootstrap interval resampling test items (paired)."""
    seeds = [
        s for s in sorted(per_seed)
        if key in per_seed[s].get(arm, {}) and key in per_seed[s].get(base, {})
    ]  # fmt: skip
    if not seeds:
        return None
    a = [per_seed[s][arm][key] for s in seeds]
    b = [per_seed[s][base][key] for s in seeds]
    items = len(a[0])
    diffs = [
        [int(x) - int(y) for x, y in zip(ra, rb, strict=True)] for ra, rb in zip(a, b, strict=True)
    ]
    point = statistics.fmean(statistics.fmean(d) for d in diffs)
    rng = random.Random(0)
    samples = []
    for _ in range(draws):
        picks = [rng.randrange(items) for _ in range(items)]
        samples.append(statistics.fmean(statistics.fmean(d[i] for i in picks) for d in diffs))
    samples.sort()
    return {
        "diff": round(point, 4),
        "ci": [round(samples[int(0.025 * draws)], 4), round(samples[int(0.975 * draws)], 4)],
    }


def table(arms: dict[str, Any]) -> str:
    lines = [
        "| arm | held-out success [95% CI] | recovery [95% CI] | vs E: success | vs E: recovery |",
        "|---|---|---|---|---|",
    ]
    for name, arm in arms.items():
        if "success" not in arm:
            lines.append(f"| {name} | not trained: no rows | | | |")
            continue
        versus = arm.get("vs_E", {})
        cells = [
            f"{arm['success']:.3f} [{arm['success_ci'][0]:.3f}, {arm['success_ci'][1]:.3f}]",
            f"{arm['recovery']:.3f} [{arm['recovery_ci'][0]:.3f}, {arm['recovery_ci'][1]:.3f}]",
        ]
        for key in ("success", "recovery"):
            d = versus.get(key) if versus else None
            cells.append(f"{d['diff']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}]" if d else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for name, arm in arms.items():
        for base in [k[3:] for k in arm if k.startswith("vs_") and k != "vs_E"]:
            diffs = [(key, arm[f"vs_{base}"][key]) for key in ("success", "recovery")]
            shown = ", ".join(
                f"{key} {d['diff']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}]"
                for key, d in diffs
                if d
            )
            lines.append(f"{name} vs {base} (paired): {shown}")
    return "\n".join(lines)


def teacher_line(figures: dict[str, Any]) -> str:
    """The guided teacher's figures in one line."""
    unguided = figures["unguided_success_train_worlds_in_sample"]
    found = figures["recovery"]
    sources = found["by_source"].items()
    by_source = ", ".join(f"{k} {v['recovered']}/{v['tried']}" for k, v in sources)
    check = figures["hint_check_held_out"]
    return (
        f"guided teacher: unguided {unguided['successes']}/{unguided['n']} training worlds "
        f"(in-sample); {found['recovered']}/{found['failures']} failures recovered "
        f"({by_source}); intervene-and-replay {found['intervene']['recovered']}/"
        f"{found['intervene']['tried']}; leak rejections {found['leak_rejections']}; held-out "
        f"without hint {check['without_hint']['successes']}/{check['worlds']}, with hint "
        f"{check['with_hint']['successes']}/{check['worlds']}"
    )


def lab_config(args: argparse.Namespace) -> LabConfig:
    """The lab's configuration from the command line (and the result file of a pretrained
    student, named for it)."""
    config = LabConfig()
    if args.quick:
        config = LabConfig(
            train_worlds=40,
            test_worlds=30,
            recovery_states=30,
            steps=30,
            teacher_steps=300,  # a guided teacher that solves some worlds, for T's rows
            work="/tmp/learning_loop_quick",
        )
    if args.student != "tiny":
        config.student = args.student
        config.work += f"_{args.student}"
        for key, value in {**PRETRAINED, **(PRETRAINED_QUICK if args.quick else {})}.items():
            setattr(config, key, value)
        config.bf16 = cpu_has_bf16()
        if args.out == RESULTS:
            args.out = RESULTS.with_name(f"learning_loop_{args.student}.json")
    fields = ("steps", "hidden", "heads", "batch_size", "test_worlds", "recovery_states", "lr")
    for field in (*fields, "work", "teacher_failures", "train_worlds"):
        if getattr(args, field):
            setattr(config, field, getattr(args, field))
    return config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="A smoke run (minutes).")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--hidden", type=int, default=None, help="Student width.")
    parser.add_argument("--heads", type=int, default=None, help="Student attention heads.")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument(
        "--train-worlds", type=int, default=None, help="Training worlds, seeds 0 to N-1 (400)."
    )
    parser.add_argument("--test-worlds", type=int, default=None, help="Held-out worlds (300).")
    parser.add_argument(
        "--recovery-states", type=int, default=None, help="Perturbed states to recover (300)."
    )
    parser.add_argument(
        "--teacher-failures",
        type=int,
        default=None,
        help="The guided teacher's failures searched by guided recovery, for T+P (150).",
    )
    parser.add_argument("--lr", type=float, default=None, help="Learning rate (1e-3; 2e-4 LoRA).")
    parser.add_argument("--work", default=None, help="Where checkpoints are kept.")
    parser.add_argument("--jobs", type=int, default=2, help="Arms trained in parallel.")
    parser.add_argument(
        "--arms",
        default=",".join(a.name for a in ARMS if "@" not in a.name),
        help="Arms to run (default: all but the curve's E@N arms).",
    )
    parser.add_argument(
        "--student", default="tiny", help="tiny, or a pretrained model such as smollm2-135m."
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--report", type=Path, help="Only summarize a .partial.json of an unfinished run."
    )
    parser.add_argument(
        "--resume", type=Path, help="Keep the (arm, seed) results of a .partial.json."
    )
    args = parser.parse_args(argv)
    config = lab_config(args)
    names = [n for n in args.arms.split(",") if n]
    started = time.time()
    seeds = list(range(args.seeds))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_suffix(".partial.json")
    command = "python bench/learning_loop.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    earlier = _load_partial(args.report or args.resume)
    if args.resume:
        check_same_precision(earlier, config)
    commands = [*earlier.pop("commands", []), command]
    names += [n for runs in earlier.values() for n in runs if n not in names]
    if args.report:
        per_seed = earlier
    else:
        per_seed = run_all(config, seeds, names, args.jobs, partial, earlier, commands)
    result = report(per_seed, names, config, commands, time.time() - started)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    if not args.report:
        partial.unlink(missing_ok=True)
    print(table(result["arms"]))
    teacher = next((a["teacher"] for a in result["arms"].values() if "teacher" in a), None)
    if teacher:
        print(teacher_line(teacher))
    print(
        f"test worlds {result['test_worlds']}, recovery states {result['recovery_states']}, "
        f"seeds {result['seeds']}, complete {result['complete']}; wrote {args.out}"
    )
    return 0


def _load_partial(path: Path | None) -> dict:
    """Results per seed (and the commands that made them) from a .partial.json."""
    if path is None:
        return {}
    loaded = orjson.loads(path.read_bytes())
    commands = loaded.pop("commands", [])
    return {"commands": commands, **{int(seed): runs for seed, runs in loaded.items()}}


def check_same_precision(earlier: dict, config: LabConfig) -> None:
    """Refuse to resume results made in another precision (seeds of one arm must compare):
    a result without the field was made before it existed, in bf16 for a pretrained student."""
    for seed, runs in earlier.items():
        if seed == "commands":
            continue
        for name, result in runs.items():
            made = result.get("bf16", config.student != "tiny")
            if made != config.bf16:
                raise SystemExit(
                    f"--resume: seed {seed} of {name} was made with bf16={made}, and this "
                    f"machine runs bf16={config.bf16} (its CPU "
                    f"{'has' if cpu_has_bf16() else 'lacks'} bf16 units); resume it on a "
                    "machine like the one that made it"
                )


def report(per_seed, names: list[str], config: LabConfig, commands: list[str], wall: float) -> dict:
    """The JSON result; `complete` is false when some (arm, seed) has no result."""
    arms = summarize(per_seed, names)
    done = [r for runs in per_seed.values() for r in runs.values() if "success" in r]
    return {
        "command": commands[-1],
        "commands": commands,
        "complete": all(name in runs for runs in per_seed.values() for name in names),
        "arms": arms,
        "test_worlds": len(done[0]["success"]) if done else 0,
        "recovery_states": len(done[0]["recovery"]) if done else 0,
        "seeds": len(per_seed),
        "seeds_done": {name: sum(name in runs for runs in per_seed.values()) for name in names},
        "config": config.__dict__,
        "about": {arm.name: arm.about for arm in ARMS if arm.name in names},
        "wall_s": round(wall, 1),
        "per_seed": {
            str(seed): {
                name: {k: v for k, v in r.items() if k not in ("test_tasks", "recovery_tasks")}
                for name, r in runs.items()
            }
            for seed, runs in per_seed.items()
        },
    }


if __name__ == "__main__":
    sys.exit(main())
