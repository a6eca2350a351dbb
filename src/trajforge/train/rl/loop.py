"""`trajforge train rl`: iterations of rollout → record → export → update → reload.

Each iteration:
1. draws `tasks_per_iteration` training worlds and runs `group_size` sampled episodes of each
   through the proxy to the served current checkpoint (`rollouts.RolloutService`);
2. turns the recorded sessions into training sequences (the RL export's token ids, mask and
   rollout logprobs) with group-normalised advantages (`advantages.py`);
3. recomputes the logprobs of the recorded model tokens with the trainer's copy of the same
   weights and checks their agreement with the rollout logprobs (correlation and the largest
   per-token difference); below `min_correlation` the run stops with an error, since the
   update would then optimise something other than what was sampled;
4. takes the GRPO-style update (`grpo.py`), writes the iteration's checkpoint, evaluates it
   on held-out worlds every `eval_every` iterations, and hot-reloads it into the server.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.errors import UserError
from trajforge.models.openai_compat import OpenAIModelConfig
from trajforge.rollout.episode import Limits
from trajforge.schema import Task, Trajectory
from trajforge.serve.codec import HFCodec
from trajforge.serve.student import Student
from trajforge.train.conditioned import conditioned_starts
from trajforge.train.evaluate import HELD_OUT_START, held_out_tasks, rate, run_lockstep
from trajforge.train.rl import checkpoints as ckpt
from trajforge.train.rl import progress
from trajforge.train.rl.advantages import advantage_signal, training_sequences
from trajforge.train.rl.config import RLConfig
from trajforge.train.rl.early_stop import MONITOR_FILE, stopped, train_monitor
from trajforge.train.rl.grpo import Agreement, agreement, grpo_update
from trajforge.train.rl.rollouts import Episode, RolloutService
from trajforge.train.rl.strategies import RunLibrary

Report = Callable[[dict[str, Any]], None]
EpisodeDone = Callable[[int, int, int], None]
"""Called as each rollout ends: (iteration, episodes finished, episodes in the iteration)."""
HeldOutDone = Callable[[int, int], None]
"""Called as a held-out evaluation starts and as each of its episodes ends: (done, total)."""


class RLError(UserError):
    """The loop cannot go on safely (e.g. rollout and training logprobs disagree)."""


def check_agreement(agree: Agreement, minimum: float, iteration: int) -> None:
    """Refuse to update when the trainer does not score what the server sampled."""
    if agree.correlation < minimum:
        raise RLError(
            f"iteration {iteration}: rollout-training logprob correlation "
            f"{agree.correlation:.4f} < {minimum} (largest per-token difference "
            f"{agree.max_abs_diff:.3f} over {agree.tokens} tokens): the trainer does not score "
            "the tokens the server sampled (tokenizer or weights differ); not updating"
        )


def train_rl(
    base: Path | None, out: Path, config: RLConfig | None = None, *, resume: bool = False,
    report: Report | None = None, on_episode: EpisodeDone | None = None,
    on_heldout: HeldOutDone | None = None, threads: int | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """Run (or continue) the loop in `out`; returns every iteration's row. `report` gets
    each row as it is written, `on_episode` each finished rollout, `on_heldout` the count of
    finished held-out episodes (done, total) while an evaluation runs. `threads` overrides
    the config's torch threads (a resumed run may share the machine differently)."""
    import torch

    if resume:
        run = ckpt.read_run(out)
        base, config = Path(run["base"]), RLConfig(**run["config"])
    elif base is None or config is None:
        raise UserError("train rl needs a base checkpoint and a config (or --resume)")
    elif ckpt.completed(out):
        raise UserError(f"{out}: already holds RL iterations; pass --resume to continue")
    if wanted := threads or config.threads:
        torch.set_num_threads(wanted)
    loop = _Loop(base, out, config, report or (lambda row: None))
    loop.on_episode, loop.on_heldout = on_episode, on_heldout
    if resume:
        progress.record_finished(out)
    else:
        initial = loop.evaluate(base) if config.eval_every else None
        ckpt.write_run(out, base, config.model_dump(), initial)
        progress.record_run(out)
        if initial is not None:
            loop.report({"iteration": 0, "heldout": initial})
    loop.run()
    return ckpt.rebuild_log(out)


class _Loop:
    def __init__(self, base: Path, out: Path, config: RLConfig, report: Report) -> None:
        import torch

        self.base, self.out, self.config, self.report = base, out, config, report
        done = ckpt.completed(out)
        self.first = (done[-1] + 1) if done else 1
        start = ckpt.iteration_dir(out, done[-1]) if done else base
        self.start = start
        torch.manual_seed(config.seed)
        self.student = Student(start)
        self.model = self.student.model
        origin = Student(base)
        self.reference, self.base_manifest = origin.model, origin.manifest
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr)
        self.generator = torch.Generator().manual_seed(config.seed)
        if done:
            state = ckpt.load_state(start)
            self.optimizer.load_state_dict(state["optimizer"])
            self.generator.set_state(state["generator"])
        self._heldout: list[Task] | None = None
        self.monitoring = False
        self.library: RunLibrary | None = None
        if config.strategies:
            self.library = RunLibrary(out, config.strategies, config.difficulty)
            self.library.forget_after(self.first - 1)
        self.on_episode: EpisodeDone | None = None
        self.on_heldout: HeldOutDone | None = None

    def run(self) -> None:
        config = self.config
        store = self.out / progress.STORE_FILE
        try:
            with RolloutService(self.start, store, backend=config.backend) as service:
                for iteration in range(self.first, config.iterations + 1):
                    self.monitor(service, iteration)
                    path = self.iteration(service, iteration)
                    service.reload(path)
        finally:
            if self.library is not None:
                self.library.close()

    def monitor(self, service: RolloutService, iteration: int) -> None:
        """Switch the proxy's failure monitor on once `early_stop_after` iterations are done."""
        after = self.config.early_stop_after
        if self.monitoring or not after or iteration <= after:
            return
        path = self.out / MONITOR_FILE
        if not path.is_file():
            try:
                info = train_monitor(self.out / progress.STORE_FILE, path, self.config.seed)
            except UserError as exc:  # e.g. no success yet: try again after the next iteration
                self.report({"iteration": iteration, "monitor": f"not trained: {exc}"})
                return
            (self.out / "monitor.json").write_bytes(orjson.dumps({"after": iteration - 1, **info}))
        service.use_monitor(path, self.config.early_stop_loss)
        self.monitoring = True

    def iteration(self, service: RolloutService, iteration: int) -> Path:
        config = self.config
        jobs = self.jobs(iteration)
        guidance, uses = self.guidance([task for _, _, task in jobs])
        episodes, stats = service.run(
            jobs,
            Limits(max_steps=config.max_steps),
            OpenAIModelConfig(
                base_url="http://unused", model="student", api_key="local", logprobs=True,
                temperature=config.temperature, max_retries=0,
                max_tokens=config.max_new_tokens or self.student.turn_tokens,
            ),
            config.concurrency,
            on_episode=self._episode_counter(iteration, len(jobs)),
            seed=config.seed * 1_000_003 + iteration, strategies=guidance,
        )  # fmt: skip
        started = time.perf_counter()
        sequences = training_sequences(episodes, config)
        advantage_s = time.perf_counter() - started
        pad = self.student.codec.pad_id
        agree = agreement(self.model, sequences, pad)
        row: dict[str, Any] = {
            "iteration": iteration,
            **_judged_means(episodes),
            "correlation": round(agree.correlation, 6),
            "max_logprob_diff": round(agree.max_abs_diff, 6),
            "scored_tokens": agree.tokens,
            "codec": service.codec,
            "advantage_s": round(advantage_s, 3),
            **advantage_signal(episodes, sequences),
            **_compute(episodes, self.monitoring),
            **stats.as_row(),
        }
        check_agreement(agree, config.min_correlation, iteration)
        started = time.perf_counter()
        update = grpo_update(
            self.model, self.reference, self.optimizer, sequences, pad,
            epochs=config.epochs, minibatch=config.minibatch, clip=config.clip,
            kl_coef=config.kl_coef, generator=self.generator,
        )  # fmt: skip
        row.update({
            "loss": round(update.loss, 5), "kl": round(update.kl, 6),
            "kl_median": round(update.kl_median, 6),
            "clipped": round(update.clipped, 4), "updates": update.steps,
            "entropy": None if update.entropy is None else round(update.entropy, 5),
            "update_s": round(time.perf_counter() - started, 3),
            "sequences": len(sequences),
        })  # fmt: skip
        if self.library is not None:
            learned = self.library.learn(iteration, [e.run for e in episodes])
            row["strategies"] = {"retrieved": dict(sorted(uses.items())), **learned}
        state = {
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "iteration": iteration,
        }
        due = config.eval_every and (
            iteration % config.eval_every == 0 or iteration == config.iterations
        )
        codec = self.student.codec
        path = ckpt.save_iteration(
            self.out, iteration, self.model, self.base_manifest, state, row,
            evaluate=self.evaluate if due else None,
            tokenizer=codec.tokenizer if isinstance(codec, HFCodec) else None,
        )  # fmt: skip
        progress.record_iteration(self.out, row)
        self.report(row)
        return path

    def _episode_counter(self, iteration: int, total: int) -> Callable[[Trajectory], None] | None:
        """Counts the iteration's finished rollouts for `on_episode` (they end in threads),
        starting with 0 now."""
        report = self.on_episode
        if report is None:
            return None
        report(iteration, 0, total)
        lock, finished = threading.Lock(), itertools.count(1)

        def count(_: Trajectory) -> None:
            with lock:
                report(iteration, next(finished), total)

        return count

    def jobs(self, iteration: int) -> list[tuple[str, str, Task]]:
        """This iteration's (session, group, task) list; the draw depends only on seeds."""
        config = self.config
        rng = random.Random(config.seed * 1_000_003 + iteration)
        nonce = f"{time.time_ns():x}"
        jobs = []
        for index in range(config.tasks_per_iteration):
            task = _training_task(rng, config)
            for sample in range(config.group_size):
                session = f"it{iteration:04d}-{nonce}-{index}-{sample}"
                jobs.append((session, f"{iteration}:{index}", task))
        return jobs

    def evaluate(self, path: Path) -> dict[str, Any]:
        """Greedy success on held-out worlds, with a Wilson 95% interval."""
        config = self.config
        if self._heldout is None:
            self._heldout = held_out_tasks(HouseholdEnv(), config.eval_tasks, config.difficulty)
        guidance, _ = self.guidance(self._heldout)
        starts = conditioned_starts(HouseholdEnv, self._heldout, guidance)
        runs = run_lockstep(
            Student(path), starts, config.max_steps,
            max_new_tokens=config.max_new_tokens, on_finished=self._heldout_counter(),
        )  # fmt: skip
        result = rate([bool(r.outcome.success) for r in runs])
        if self.library is not None:
            result["with_strategies"] = sum(bool(texts) for texts in guidance.values())
        return result

    def guidance(self, tasks: list[Task]) -> tuple[dict[str, list[str]], Counter[str]]:
        """The strategies of the run's library for each task, and how often each was
        retrieved (nothing without `config.strategies`)."""
        if self.library is None:
            return {}, Counter()
        return self.library.texts_for(tasks)

    def _heldout_counter(self) -> Callable[[Trajectory], None] | None:
        """Counts finished held-out episodes for `on_heldout`, starting with 0 now."""
        report, total = self.on_heldout, len(self._heldout or [])
        if report is None:
            return None
        report(0, total)
        finished = itertools.count(1)
        return lambda _: report(next(finished), total)


def _judged_means(episodes: list[Episode]) -> dict[str, float | None]:
    """Mean reward and success over the episodes with an outcome (model errors are counted
    apart, in `model_error_episodes`); None when no episode has one."""
    judged = [e for e in episodes if e.judged]
    if not judged:
        return {"reward": None, "success": None}
    return {
        "reward": round(sum(e.reward for e in judged) / len(judged), 4),
        "success": round(sum(bool(e.run.outcome.success) for e in judged) / len(judged), 4),
    }


def _compute(episodes: list[Episode], monitoring: bool) -> dict[str, Any]:
    """Episode-steps taken, reward per episode-step, and episodes the monitor stopped."""
    steps = sum(len(e.run.assistant_indices()) for e in episodes)
    reward = sum(e.reward for e in episodes)
    return {
        "episode_steps": steps,
        "reward_per_step": round(reward / max(1, steps), 5),
        "monitor_on": monitoring,
        "stopped": sum(stopped(e.recorded) for e in episodes),
    }


def _training_task(rng: random.Random, config: RLConfig) -> Task:
    """A solvable training world (seeds stay below the held-out range)."""
    limit = min(config.train_seeds, HELD_OUT_START)
    while True:
        task = task_for(rng.randrange(limit), config.difficulty)
        if task.gold:
            return task
