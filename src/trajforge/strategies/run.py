"""The library functions behind `trajforge strategies`: distil stored runs, retrieve for a task."""

from __future__ import annotations

from pydantic import BaseModel

from trajforge.diagnose.storage import load_diagnoses
from trajforge.errors import UserError
from trajforge.models.base import ChatModel
from trajforge.schema import Message, Strategy, Task, Trajectory
from trajforge.store.filters import TrajectoryFilter
from trajforge.store.sqlite import Store
from trajforge.strategies.candidates import ContrastConfig, ContrastProposer, Proposer
from trajforge.strategies.distil import DistilConfig, DistilReport, distil
from trajforge.strategies.library import latest, save_all
from trajforge.strategies.llm import LLMProposer
from trajforge.strategies.retrieve import Retrieved, Retriever, retriever, task_query


class DistilOutcome(BaseModel):
    """A distillation's report and the strategy versions it stored."""

    report: DistilReport
    stored: list[Strategy]
    llm_rejected_lines: int = 0


def proposers(sources: list[str], model: ChatModel | None) -> list[Proposer]:
    """`contrast` and/or `llm` (which needs `model`)."""
    made: list[Proposer] = []
    for source in sources:
        if source == "contrast":
            made.append(ContrastProposer(ContrastConfig()))
        elif source == "llm" and model is not None:
            made.append(LLMProposer(model))
        else:
            hint = " (give --base-url and --llm-model)" if source == "llm" else ""
            raise UserError(f"unknown or unusable strategy source {source!r}{hint}")
    return made


def distil_store(
    store: Store,
    flt: TrajectoryFilter,
    made: list[Proposer],
    config: DistilConfig,
    save: bool = True,
) -> DistilOutcome:
    """Distil from the stored runs `flt` selects; store the kept strategies (new versions).
    Stored verified diagnoses of those runs mark the failures they confirm."""
    runs = list(store.query(flt))
    diagnoses = load_diagnoses(store, [run.id for run in runs], verified_only=True)
    decisive = {d.trajectory_id: d.step for d in diagnoses if d.step is not None}
    report = distil(runs, made, config, decisive)
    stored = save_all(store, report.kept()) if save else []
    rejected = sum(p.rejected_lines for p in made if isinstance(p, LLMProposer))
    return DistilOutcome(report=report, stored=stored, llm_rejected_lines=rejected)


def retrieve_for(
    store: Store,
    task: Task,
    k: int = 3,
    kind: str = "lexical",
    messages: list[Message] | None = None,
) -> list[Retrieved]:
    """The `k` stored strategies (latest versions) that best match a task or an episode."""
    strategies = latest(store)
    if not strategies:
        return []
    return retriever(kind, strategies).rank(task_query(task, messages), k)


def guidance_for(
    store: Store, tasks: list[Task], k: int, kind: str = "lexical"
) -> dict[str, list[str]]:
    """Task id -> the texts of its `k` best stored strategies (for `PolicyOptions.strategies`)."""
    strategies = latest(store)
    if not strategies:
        raise UserError("the store holds no strategies: run `trajforge strategies distil` first")
    ranked = retriever(kind, strategies).rank_many([task_query(task) for task in tasks], k)
    return {
        task.id: [r.strategy.text for r in hits] for task, hits in zip(tasks, ranked, strict=True)
    }


class RetrievedStrategies:
    """The `k` strategies of a library that best match a failed run's task and the messages
    before the point a guided recovery continues it from (a `StrategyLookup` of guided
    recovery: `trajforge recover --source strategies`)."""

    def __init__(self, ranker: Retriever, k: int) -> None:
        self.ranker = ranker
        self.k = k

    @classmethod
    def from_store(cls, store: Store, k: int, kind: str = "lexical") -> RetrievedStrategies:
        strategies = latest(store)
        if not strategies:
            raise UserError(
                "the store holds no strategies: run `trajforge strategies distil` first"
            )
        return cls(retriever(kind, strategies), k)

    def texts(self, failed: Trajectory, at: int) -> list[str]:
        query = task_query(failed.task, failed.messages[:at] if at else None)
        return [hit.strategy.text for hit in self.ranker.rank(query, self.k)]
