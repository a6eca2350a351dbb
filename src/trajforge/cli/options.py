"""Option sets: groups of flags that several commands offer, each declared once.

An option set is a frozen dataclass whose fields are annotated with typer options. A command
takes the whole group as one parameter, and `option_sets` spreads its fields into the
command's signature (at that parameter's place, so `--help` lists them there) and gathers
them back into one value when the command runs:

    @option_sets
    def ls_command(db: DbOption = None, runs: RunFilter = RunFilter(), ...) -> None:
        flt = runs.selection()

The parameter's default sets the defaults of the flags (`PolicyFlags(temperature=0.7)`).
`Annotated[RunFilter, Offer(without=("outcome",))]` leaves flags out of a command, and
`Offer(options={"model": SomeOption})` gives one field another flag in that command.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from trajforge.errors import UserError
from trajforge.store import TrajectoryFilter

if TYPE_CHECKING:  # imported where used: `ls` and `show` start without the policy layer
    from trajforge.agents.spec import PolicyOptions
    from trajforge.models.openai_compat import OpenAIModelConfig

R = TypeVar("R")

HarnessOption = Annotated[str | None, typer.Option("--harness", help="Only this source harness.")]
ModelOption = Annotated[str | None, typer.Option("--model", help="Only models containing this.")]
EnvOption = Annotated[str | None, typer.Option("--env", help="Only this environment.")]
TaskOption = Annotated[str | None, typer.Option("--task", help="Only this task id.")]
OutcomeOption = Annotated[
    str | None,
    typer.Option(
        "--outcome",
        help="Only 'success', 'failure' or 'model_error' runs (a model error is not a failure).",
    ),
]
SearchOption = Annotated[
    str | None,
    typer.Option(
        "--search",
        help='Only runs whose text matches this full-text query (words, "phrases", AND / OR / '
        "NOT, prefix*).",
    ),
]
LimitOption = Annotated[int | None, typer.Option("--limit", help="At most this many runs.")]
BaseUrlOption = Annotated[
    str | None,
    typer.Option("--base-url", envvar="TRAJFORGE_BASE_URL", help="OpenAI-compatible endpoint URL."),
]
LlmModelOption = Annotated[
    str | None, typer.Option("--llm-model", envvar="TRAJFORGE_MODEL", help="Model name there.")
]
ApiKeyOption = Annotated[
    str | None, typer.Option("--api-key", envvar="TRAJFORGE_API_KEY", help="API key there.")
]
TemperatureOption = Annotated[float, typer.Option("--temperature", help="llm: temperature.")]
ErrorRateOption = Annotated[float, typer.Option("--error-rate", help="noisy-expert: error rate.")]
UserOption = Annotated[str, typer.Option("--user", help="User simulator: scripted or llm.")]


@dataclass(frozen=True)
class RunFilter:
    """Which stored runs a command reads."""

    harness: HarnessOption = None
    model: ModelOption = None
    env: EnvOption = None
    task: TaskOption = None
    outcome: OutcomeOption = None
    search: SearchOption = None
    limit: LimitOption = None

    def selection(
        self, ids: list[str] | None = None, outcome: str | None = None
    ) -> TrajectoryFilter:
        """The store filter of these flags (`outcome` stands in for a command without it)."""
        wanted = outcome or self.outcome
        if wanted not in (None, "success", "failure", "model_error"):
            raise UserError(
                f"--outcome must be 'success', 'failure' or 'model_error', got '{wanted}'"
            )
        return TrajectoryFilter(
            ids=ids or [],
            harness=self.harness,
            model=self.model,
            environment=self.env,
            task_id=self.task,
            success=None if wanted in (None, "model_error") else wanted == "success",
            model_error=True if wanted == "model_error" else None,
            text=self.search,
            limit=self.limit,
        )


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible endpoint: its URL, model name and key."""

    base_url: BaseUrlOption = None
    llm_model: LlmModelOption = None
    api_key: ApiKeyOption = None

    def model_config(self) -> OpenAIModelConfig:
        from trajforge.models.openai_compat import OpenAIModelConfig

        return OpenAIModelConfig(base_url=self.base_url, model=self.llm_model, api_key=self.api_key)

    def policy_options(self, error_rate: float, temperature: float = 0.0) -> PolicyOptions:
        from trajforge.agents.spec import PolicyOptions

        return PolicyOptions(
            error_rate=error_rate,
            base_url=self.base_url,
            model=self.llm_model,
            api_key=self.api_key,
            temperature=temperature,
        )


@dataclass(frozen=True)
class PolicyFlags(Endpoint):
    """The endpoint of the llm policy and the options of the sampled policies."""

    temperature: TemperatureOption = 0.0
    error_rate: ErrorRateOption = 0.2

    def options(self) -> PolicyOptions:
        return self.policy_options(self.error_rate, self.temperature)


StrategiesOption = Annotated[
    int,
    typer.Option(
        "--strategies",
        min=0,
        help="Retrieve this many stored strategies per task into the policy's prompt "
        "(recover: the teacher's guidance from the strategies source; 0: none).",
    ),
]
RetrieverOption = Annotated[
    str, typer.Option("--retriever", help="lexical (BM25) or embedding (all-MiniLM-L6-v2).")
]


@dataclass(frozen=True)
class StrategyFlags:
    """Retrieved strategies as guidance for policies that read it (see `strategies`)."""

    strategies: StrategiesOption = 0
    retriever: RetrieverOption = "lexical"

    def guided(self, options: PolicyOptions, db: Any, tasks: list) -> PolicyOptions:
        """`options` with the strategies retrieved for each task from the store at `db`."""
        if not self.strategies:
            return options
        from trajforge.cli.common import open_store
        from trajforge.strategies.run import guidance_for

        with open_store(db) as store:
            found = guidance_for(store, tasks, self.strategies, self.retriever)
        return options.model_copy(update={"strategies": found})


@dataclass(frozen=True)
class Offer:
    """How a command offers an option set: flags left out, and fields given another flag."""

    without: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)


RunFilterNoOutcome = Annotated[RunFilter, Offer(without=("outcome",))]
"""The run filter of commands that choose the outcome themselves (or read every outcome)."""


def option_sets(command: Callable[..., R]) -> Callable[..., R]:
    """`command` with each option-set parameter spread into its flags (see the module doc)."""
    hints = typing.get_type_hints(command, include_extras=True)
    parameters: list[inspect.Parameter] = []
    groups: dict[str, tuple[type, list[str]]] = {}
    for parameter in inspect.signature(command).parameters.values():
        hint = hints.get(parameter.name, parameter.annotation)
        group, offer = _option_set(hint)
        if group is None:
            parameters.append(_keyword(parameter.name, hint, parameter.default))
            continue
        spread = _spread(group, offer, parameter.default)
        groups[parameter.name] = (group, [p.name for p in spread])
        parameters += spread
    names = [p.name for p in parameters]
    if len(set(names)) != len(names):
        raise TypeError(f"{command.__name__}: option sets repeat a parameter name: {names}")

    @functools.wraps(command)
    def gathered(**values: Any) -> R:
        for name, (group, fields) in groups.items():
            values[name] = group(**{f: values.pop(f) for f in fields})
        return command(**values)

    gathered.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    gathered.__annotations__ = {p.name: p.annotation for p in parameters}
    return gathered


def _option_set(hint: Any) -> tuple[type | None, Offer]:
    """The option-set class of a parameter's annotation (None if it is not one)."""
    offer = Offer()
    if typing.get_origin(hint) is Annotated:
        hint, *extras = typing.get_args(hint)
        offer = next((e for e in extras if isinstance(e, Offer)), offer)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint, offer
    return None, offer


def _spread(group: type, offer: Offer, default: Any) -> list[inspect.Parameter]:
    hints = typing.get_type_hints(group, include_extras=True)
    instance = default if isinstance(default, group) else group()
    return [
        _keyword(f.name, offer.options.get(f.name, hints[f.name]), getattr(instance, f.name))
        for f in dataclasses.fields(group)
        if f.name not in offer.without
    ]


def _keyword(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )
