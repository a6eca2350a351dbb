"""Strategies that accumulate across an RL run (`RLConfig.strategies`).

Before an iteration's rollouts, each task gets the `k` strategies of the run's library that
the lexical retriever ranks first for it, at the end of the episode's system prompt (the block
an llm policy sees, `agents.llm.with_strategies`); the recorded sessions, and so the RL
samples, carry that block. After the rollouts, the iteration's episodes join the runs the
library is distilled from, and distillation runs again over all of them (contrast proposer,
each candidate kept only if runs of tasks it was not distilled from support it); what it
keeps is saved as new versions. The library only grows: a strategy stays retrievable once
kept, at its latest version.

Everything lives in `OUT/strategies.db`, an ordinary store (`trajforge strategies ls --db`,
`trajforge ls --db`): the harness's runs, named `rl-iteration-N`, and the versioned library.
A run resumed after a crash first drops the runs of iterations that left no checkpoint.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trajforge.schema import Strategy, Task, Trajectory
from trajforge.store import Store
from trajforge.store.filters import TrajectoryFilter
from trajforge.strategies import ContrastProposer, DistilConfig, distil, latest, save_all
from trajforge.strategies.retrieve import retriever, task_query

STRATEGIES_FILE = "strategies.db"


def run_name(iteration: int) -> str:
    return f"rl-iteration-{iteration}"


class RunLibrary:
    """The strategy library of one RL run and the runs it is distilled from."""

    def __init__(self, out: Path, k: int, difficulty: int) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.store = Store(out / STRATEGIES_FILE)
        self.k = k
        self.family = f"household-d{difficulty}-rl"

    def close(self) -> None:
        self.store.close()

    def forget_after(self, iteration: int) -> int:
        """Drop the runs of iterations after `iteration` (left by a crashed one)."""
        dropped = 0
        with self.store.transaction():
            for row in self.store.rows():
                name = row.run or ""
                if name.startswith("rl-iteration-") and int(name.rsplit("-", 1)[1]) > iteration:
                    self.store.delete(row.id)
                    dropped += 1
        return dropped

    def strategies(self) -> list[Strategy]:
        return latest(self.store)

    def texts_for(self, tasks: Sequence[Task]) -> tuple[dict[str, list[str]], Counter[str]]:
        """Task id -> the texts of its `k` best strategies, and how often each was retrieved
        (by strategy name, once per distinct task)."""
        library = self.strategies()
        if not library:
            return {}, Counter()
        unique = list({task.id: task for task in tasks}.values())
        ranked = retriever("lexical", library).rank_many([task_query(t) for t in unique], self.k)
        uses: Counter[str] = Counter(hit.strategy.name for hits in ranked for hit in hits)
        texts = {
            task.id: [hit.strategy.text for hit in hits]
            for task, hits in zip(unique, ranked, strict=True)
        }
        return texts, uses

    def learn(self, iteration: int, runs: Sequence[Trajectory]) -> dict[str, Any]:
        """Add an iteration's runs (model errors left out: they have no outcome), distil
        again over every run so far and save what is kept; the figures for the row."""
        judged = [run for run in runs if run.outcome.status != "model_error"]
        named = [_named(run, iteration) for run in judged]
        with self.store.transaction():
            self.store.add_many(named)
        everything = list(self.store.query(TrajectoryFilter(environment="household")))
        report = distil(everything, [ContrastProposer()], DistilConfig(family=self.family))
        written = save_all(self.store, report.kept())
        return {
            "distilled_from": len(everything),
            "candidates": len(report.judged),
            "kept": len(report.kept()),
            "new_versions": len(written),
            "library": len(self.strategies()),
        }


def _named(run: Trajectory, iteration: int) -> Trajectory:
    source = run.source.model_copy(update={"run": run_name(iteration)})
    return run.model_copy(update={"source": source})
