"""The trajectory schema: one run of one agent on one task.

Messages are in OpenAI chat form. Everything that points into a run (labels, faults,
LLM calls, fork points) points at a **message index**: the position in
`Trajectory.messages`, counted from 0. Importers document how their dataset's own step
numbers map onto it.

The schema is versioned by `FORMAT_VERSION`; a trajectory stores the version it was written
with, and readers refuse versions newer than their own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, Literal, get_args

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    field_serializer,
    model_validator,
)
from pydantic_core import to_json

FORMAT_VERSION = 1

IMPORT_WARNINGS = "import_warnings"
"""`Trajectory.metadata` key: what an importer could not read of the run (a list of lines,
for example the fields of a newer version of its format that it skipped)."""

Role = Literal["system", "user", "assistant", "tool"]
LabelSource = Literal["human", "oracle", "model", "heuristic"]

TerminationReason = Literal[
    "agent_stop",
    "user_stop",
    "env_done",
    "submitted",
    "max_steps",
    "max_tokens",
    "max_wall_time",
    "monitor",
    "handoff",
    "replay_end",
    "perturbed",
    "no_distractor",
    "error",
    "model_error",
    "other",
]
"""Why a run stopped: the agent answered with no one to reply (`agent_stop`), the user or the
environment ended it, the agent submitted, a limit, the failure monitor, a handoff or replay
point, a deliberate perturbation, a crash, a model call that failed every retry
(`model_error`); `other`: a harness's own words (kept in
`Outcome.exit_status`)."""
TERMINATION_REASONS: tuple[TerminationReason, ...] = get_args(TerminationReason)
MODEL_ERROR: TerminationReason = "model_error"

OutcomeStatus = Literal["success", "failure", "model_error", "unjudged"]
"""What a run's outcome says about its agent: it solved the task (`success`), it did not
(`failure`), the run ended because the model or its endpoint could not be reached
(`model_error`: says nothing about the agent, so it is kept out of failure counts, failure
selections, diagnoses and training data), or it was not judged (`unjudged`)."""

EnvFaultKind = Literal["transient", "persistent", "silent"]
"""Tool faults an environment wrapper injects (see `trajforge.envs.faults`)."""
UpstreamFaultKind = Literal[
    "upstream_timeout",
    "upstream_5xx",
    "upstream_truncated",
    "upstream_malformed",
    "upstream_unreachable",
]
"""Model-server faults the recording proxy injects or observes (see `trajforge.proxy`)."""
FaultKind = Literal[EnvFaultKind, UpstreamFaultKind, "other"]
"""Every fault kind; `other`: a kind an older version recorded that is no longer known."""
FAULT_KINDS: tuple[FaultKind, ...] = get_args(EnvFaultKind) + get_args(UpstreamFaultKind)
"""The kinds a fault spec can name (all but `other`)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolCall(_Model):
    """A function call requested by an assistant message."""

    id: str = Field(description="Call id; tool messages answer it through `tool_call_id`.")
    name: str = Field(description="Name of the tool (function) called.")
    arguments: str = Field(
        default="{}", description="Arguments as the JSON text the model produced (may be invalid)."
    )
    type: Literal["function"] = "function"

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a dict; raises ValueError when they are not a JSON object."""
        value = orjson.loads(self.arguments)
        if not isinstance(value, dict):
            raise ValueError(f"tool call {self.id} arguments are not a JSON object")
        return value


class Message(_Model):
    """One chat message in OpenAI form."""

    role: Role = Field(description="system, user, assistant or tool.")
    content: str | list[dict[str, Any]] | None = Field(
        default=None, description="Text, or a list of content parts, or None for pure tool calls."
    )
    name: str | None = Field(
        default=None, description="Speaker name, for multi-agent runs (which agent spoke)."
    )
    tool_calls: list[ToolCall] | None = Field(
        default=None, description="Tool calls requested by an assistant message."
    )
    tool_call_id: str | None = Field(
        default=None, description="For a tool message: the id of the call it answers."
    )
    extra: dict[str, Any] = Field(
        default_factory=dict,
        description="Harness-specific data kept verbatim (raw model response, turn index...).",
    )

    def text(self) -> str:
        """The content as plain text (content parts joined)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(str(part.get("text", "")) for part in self.content)


class Usage(_Model):
    """Token, cost and time accounting."""

    prompt_tokens: int | None = Field(default=None, description="Prompt (input) tokens.")
    completion_tokens: int | None = Field(default=None, description="Completion (output) tokens.")
    total_tokens: int | None = Field(default=None, description="Prompt plus completion tokens.")
    cost: float | None = Field(default=None, description="Cost in US dollars, when known.")
    wall_time_s: float | None = Field(default=None, description="Wall-clock seconds.")

    @classmethod
    def summed(
        cls, usages: Iterable[Usage], cost: float | None = None, wall_time_s: float | None = None
    ) -> Usage:
        """The token counts of several calls added up (a missing count adds 0)."""
        prompt = completion = 0
        for usage in usages:
            prompt += usage.prompt_tokens or 0
            completion += usage.completion_tokens or 0
        return cls(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            cost=cost,
            wall_time_s=wall_time_s,
        )


class LLMCall(_Model):
    """One model call, linked to the assistant message it produced."""

    id: str = Field(description="Call id (the upstream's response id when it has one).")
    message_index: int | None = Field(
        default=None, description="Index of the assistant message this call produced."
    )
    model: str | None = Field(default=None, description="Model name reported by the server.")
    request: dict[str, Any] | None = Field(
        default=None, description="The request body, secrets removed."
    )
    response: dict[str, Any] | None = Field(default=None, description="The response body.")
    prompt_token_ids: list[int] | None = Field(default=None, description="Prompt token ids.")
    completion_token_ids: list[int] | None = Field(
        default=None, description="Completion token ids."
    )
    logprobs: list[float] | None = Field(
        default=None, description="Log-probability of each completion token."
    )
    latency_s: float | None = Field(default=None, description="Seconds from request to response.")
    usage: Usage | None = Field(default=None, description="Token usage of this call.")
    started_at: float | None = Field(default=None, description="Unix time the call started.")
    error: str | None = Field(default=None, description="Error text when the call failed.")
    extra: dict[str, Any] = Field(
        default_factory=dict, description="Anything else recorded (drift audit, status code...)."
    )
    prompt_token_prefix: int | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Stored form only (long recorded sessions): the prompt starts with this "
        "many ids of the token base (the prompt + completion ids of the nearest earlier call "
        "that has both), and `prompt_token_ids` holds only the rest. Loading a trajectory "
        "expands it and sets this back to None.",
    )


def _token_base(call: LLMCall) -> list[int] | None:
    if call.prompt_token_ids is None or call.completion_token_ids is None:
        return None
    return call.prompt_token_ids + call.completion_token_ids


def common_prefix_length(left: list, right: list) -> int:
    """How many leading items `left` and `right` share.

    Compared by slices, at C speed: equal up to the shorter length (the usual case of a
    conversation that grows) in one comparison, otherwise by bisection, so a prompt of
    thousands of token ids that differs near its end costs microseconds, not a Python loop.
    """
    shorter = min(len(left), len(right))
    # Only the longer list is sliced: a slice copies its items and touches each one's
    # reference count, which cost as much as comparing them.
    if _head(left, shorter) == _head(right, shorter):
        return shorter
    equal, differs = 0, shorter  # left[:equal] == right[:equal]; they differ before `differs`
    while differs - equal > 1:
        middle = (equal + differs) // 2
        if left[equal:middle] == right[equal:middle]:
            equal = middle
        else:
            differs = middle
    return equal


def _head(items: list, length: int) -> list:
    return items if len(items) == length else items[:length]


class PromptPrefixes:
    """For calls in order: how many leading ids of each prompt repeat the token base (the
    prompt + completion ids of the latest earlier call that has both), as `compact_llm_calls`
    stores them. Kept by a session that grows call by call, each prompt is compared once."""

    def __init__(self) -> None:
        self.shared: list[int] = []
        self._base: list[int] | None = None

    def add(
        self, call: LLMCall, shared: int | None = None, tokens: list[int] | None = None
    ) -> None:
        """Count `call`'s shared prompt ids, unless the caller counted them (`shared`);
        `tokens`: the call's prompt + completion ids, when the caller has joined them."""
        ids, base = call.prompt_token_ids, self._base
        if shared is None:
            shared = common_prefix_length(base, ids) if base and ids else 0
        self.shared.append(shared)
        self._base = (_token_base(call) if tokens is None else tokens) or base


def compact_llm_calls(calls: list[LLMCall], shared: list[int] | None = None) -> list[LLMCall]:
    """The calls in stored form: each prompt's ids that repeat its token base are replaced by
    `prompt_token_prefix` (a session's document then grows with its new tokens only).
    `shared`: the counts of `PromptPrefixes`, when the caller keeps them."""
    if shared is None:
        prefixes = PromptPrefixes()
        for call in calls:
            prefixes.add(call)
        shared = prefixes.shared
    return [
        call.model_copy(
            update={"prompt_token_ids": call.prompt_token_ids[kept:], "prompt_token_prefix": kept}
        )
        if kept and call.prompt_token_ids is not None
        else call
        for call, kept in zip(calls, shared, strict=True)
    ]


def expand_llm_calls(calls: list[LLMCall]) -> None:
    """Undo `compact_llm_calls` in place (calls not in stored form are left as they are)."""
    base: list[int] | None = None
    for index, call in enumerate(calls):
        if call.prompt_token_prefix is not None:
            if base is None or call.prompt_token_prefix > len(base):
                raise ValueError(
                    f"llm_calls.{index}.prompt_token_prefix: {call.prompt_token_prefix} ids "
                    "of an earlier call's tokens, which it does not have"
                )
            call.prompt_token_ids = base[: call.prompt_token_prefix] + (call.prompt_token_ids or [])
            call.prompt_token_prefix = None
        base = _token_base(call) or base


class Fault(_Model):
    """A fault injected into (or observed in) a tool or the model server: ground truth."""

    message_index: int = Field(description="Index of the message that carries the faulty result.")
    kind: FaultKind = Field(description="transient, persistent, silent, or an upstream_* kind.")
    tool: str | None = Field(default=None, description="Tool (or endpoint) affected.")
    detail: str | None = Field(default=None, description="What was done: error text, data altered.")

    _recorded_kind: str | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _older_kinds(cls, data: Any, handler: ModelWrapValidatorHandler[Fault]) -> Fault:
        """A kind no longer in `FaultKind` (written by an older version) loads as `other`;
        the recorded word is kept (`recorded_kind`) and written back unchanged."""
        raw = data.get("kind") if isinstance(data, dict) else None
        if raw is None or raw in FAULT_KINDS or raw == "other":
            return handler(data)
        fault = handler({**data, "kind": "other"})
        fault._recorded_kind = str(raw)
        return fault

    @property
    def recorded_kind(self) -> str:
        """The kind as the document records it (differs from `kind` only for `other`)."""
        return self._recorded_kind or self.kind

    @field_serializer("kind")
    def _write_kind(self, kind: str) -> str:
        return self._recorded_kind if kind == "other" and self._recorded_kind else kind


class Label(_Model):
    """An error annotation: which message went wrong, who did it, and why."""

    message_index: int | None = Field(
        default=None, description="Message index of the error (None: the run as a whole)."
    )
    agent: str | None = Field(default=None, description="The agent responsible (multi-agent).")
    category: str | None = Field(default=None, description="Error category, when given.")
    reason: str | None = Field(default=None, description="Free-text explanation.")
    source: LabelSource = Field(description="Who made the label: human, oracle, model, heuristic.")


class Outcome(_Model):
    """How the run ended and how that was judged."""

    success: bool | None = Field(default=None, description="Whether the task was solved.")
    reward: float | None = Field(
        default=None, description="Scalar reward, when the source has one."
    )
    judged_by: str | None = Field(
        default=None, description="What judged it: swe-bench-harness, tau-bench-reward, env..."
    )
    termination_reason: TerminationReason | None = Field(
        default=None, description="Why the run stopped: submitted, max_steps, error, monitor..."
    )
    details: dict[str, Any] = Field(
        default_factory=dict, description="Judge-specific details (test lists, reward info)."
    )

    _exit_status: str | None = PrivateAttr(default=None)
    _recorded_failure: bool = PrivateAttr(default=False)

    @model_validator(mode="wrap")
    @classmethod
    def _harness_words(cls, data: Any, handler: ModelWrapValidatorHandler[Outcome]) -> Outcome:
        """A harness's own word for how the run ended (or one an older version stored)
        loads as `submitted` or `other`; the word is kept as `exit_status` and the document
        keeps it unchanged (so content ids do not move). A model error that an older version
        recorded as a failure loads as not judged (its document keeps `false`)."""
        raw = data.get("termination_reason") if isinstance(data, dict) else None
        if raw is None or raw in TERMINATION_REASONS:
            return _unjudged_model_error(handler(data))
        outcome = handler({**data, "termination_reason": _reason_for(str(raw))})
        outcome._exit_status = str(raw)
        return outcome

    @property
    def status(self) -> OutcomeStatus:
        """What the outcome says about the agent (see `OutcomeStatus`)."""
        return outcome_status(self.success, self.termination_reason)

    def not_judged_for_model_error(self) -> None:
        """A run the model or endpoint ended: unless it had solved the task, it is not
        judged (success and reward unknown; the environment's verdict stays in `details`)."""
        if self.termination_reason != MODEL_ERROR or self.success is True:
            return
        self.details = {**self.details, "env_success": self.success, "env_reward": self.reward}
        self.success = self.reward = None

    @property
    def exit_status(self) -> str | None:
        """The harness's own words, when they are not a `TerminationReason` (e.g.
        mini-swe-agent's `Submitted`, SWE-agent's `exit_cost`)."""
        return self._exit_status

    @field_serializer("termination_reason")
    def _write_reason(self, reason: str | None) -> str | None:
        recorded = self._exit_status
        return recorded if recorded and reason == _reason_for(recorded) else reason

    @field_serializer("success")
    def _write_success(self, success: bool | None) -> bool | None:
        return False if success is None and self._recorded_failure else success


def outcome_status(success: bool | None, termination_reason: str | None) -> OutcomeStatus:
    """The status of an outcome from its two fields (stored runs are counted by it too)."""
    if success:
        return "success"
    if termination_reason == MODEL_ERROR:
        return "model_error"
    return "unjudged" if success is None else "failure"


def _unjudged_model_error(outcome: Outcome) -> Outcome:
    if outcome.termination_reason == MODEL_ERROR and outcome.success is False:
        outcome.success = None
        outcome._recorded_failure = True
    return outcome


def _reason_for(word: str) -> TerminationReason:
    return "submitted" if word.lower().startswith("submitted") else "other"


class Task(_Model):
    """What the agent was asked to do."""

    id: str = Field(description="Task id within its environment or benchmark.")
    environment: str | None = Field(
        default=None, description="Environment name: tau-retail, swe-bench, household..."
    )
    instruction: str | None = Field(default=None, description="The task statement.")
    gold: Any = Field(
        default=None, description="Gold solution when known (actions, patch, answer)."
    )
    data: dict[str, Any] = Field(
        default_factory=dict, description="Other task fields kept from the source."
    )


class Source(_Model):
    """Where the run came from."""

    harness: str | None = Field(default=None, description="Agent harness: mini-swe-agent, tau...")
    model: str | None = Field(default=None, description="Model that drove the agent.")
    run: str | None = Field(default=None, description="Run or experiment name, trial number...")
    file: str | None = Field(default=None, description="File it was imported from, if any.")
    format: str | None = Field(default=None, description="Importer format name.")


class ForkParent(_Model):
    """For a fork: the trajectory it continues and where."""

    trajectory_id: str = Field(description="Id of the parent trajectory.")
    message_index: int = Field(description="The fork keeps the parent's first N messages.")


class Trajectory(_Model):
    """One run of one agent on one task."""

    format_version: int = Field(default=FORMAT_VERSION, description="Schema version.")
    id: str = Field(default="", description="Content-derived id; see `content_id()`.")
    task: Task = Field(description="The task.")
    source: Source = Field(default_factory=Source, description="Harness, model, run.")
    messages: list[Message] = Field(default_factory=list, description="The conversation.")
    tools: list[dict[str, Any]] = Field(
        default_factory=list, description="Tool JSON schemas offered to the agent (OpenAI form)."
    )
    outcome: Outcome = Field(default_factory=Outcome, description="How it ended.")
    usage: Usage = Field(default_factory=Usage, description="Totals over the run.")
    llm_calls: list[LLMCall] = Field(default_factory=list, description="Model calls.")
    faults: list[Fault] = Field(default_factory=list, description="Injected faults.")
    labels: list[Label] = Field(default_factory=list, description="Error annotations.")
    parent: ForkParent | None = Field(default=None, description="Set for forks.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Anything else.")

    @model_validator(mode="after")
    def _expand_stored_token_ids(self) -> Trajectory:
        if any(call.prompt_token_prefix is not None for call in self.llm_calls):
            expand_llm_calls(self.llm_calls)
        return self

    def content_id(self) -> str:
        """A stable id derived from the content (everything except `id` and `source.file`).

        Importing the same run twice, from the same or a moved file, gives the same id: it is
        a hash of the JSON document with `id` empty and `source.file` null.
        """
        return _digest(_to_json(self._anonymous()))

    def identified_document(self) -> tuple[str, bytes]:
        """(id, JSON document with that id): the own id, else the content id.

        Serializes the messages once: the content id is hashed from the anonymous document,
        and the document to keep is the same bytes with the id and file put back (checked
        against the expected layout; otherwise serialized again).
        """
        anonymous = self._anonymous()
        body = _to_json(anonymous)
        traj_id = self.id or _digest(body)
        document = _with_identity(body, anonymous, self.source, traj_id)
        if document is None:
            document = _to_json(self.model_copy(update={"id": traj_id}))
        return traj_id, document

    def _anonymous(self) -> Trajectory:
        source = self.source.model_copy(update={"file": None})
        return self.model_copy(update={"id": "", "source": source})

    def with_id(self) -> Trajectory:
        """Set `id` to the content id when it is empty; returns self."""
        if not self.id:
            self.id = self.content_id()
        return self

    @property
    def success(self) -> bool | None:
        return self.outcome.success

    def assistant_indices(self) -> list[int]:
        """Message indices of the assistant messages (the agent's steps)."""
        return [i for i, m in enumerate(self.messages) if m.role == "assistant"]


def _to_json(model: BaseModel) -> bytes:
    return model.__pydantic_serializer__.to_json(model)


def _digest(document: bytes) -> str:
    return hashlib.sha256(document).hexdigest()[:20]


def _with_identity(
    body: bytes, anonymous: Trajectory, source: Source, traj_id: str
) -> bytes | None:
    """`body` (the anonymous document) with `traj_id` and the real source; None on surprise.

    The layout is pydantic's: fields in declaration order, no spaces, so the document is
    `{"format_version":N,"id":"","task":{...},"source":{...},...`.
    """
    head = b'{"format_version":%d,"id":' % anonymous.format_version
    task = b',"task":' + _to_json(anonymous.task) + b',"source":'
    anonymous_source = _to_json(anonymous.source)
    start = len(head) + 2 + len(task)
    expected = head + b'""' + task + anonymous_source
    if body[: start + len(anonymous_source)] != expected:
        return None
    identity = head + to_json(traj_id) + task + _to_json(source)
    return identity + body[start + len(anonymous_source) :]


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a trajectory document."""
    return Trajectory.model_json_schema()


StrategySource = Literal["contrast", "llm"]
"""`contrast`: mined from successful vs failed runs of a task family; `llm`: written by a chat
model over those runs (and checked on held-out runs all the same)."""
EvidenceKind = Literal["success", "failure", "recovered"]
"""A run's part in a strategy's evidence: a success that followed the rule, a failure that broke
it, or a recovered failure (a demonstration whose parent failed) that followed it."""


class StrategyRule(_Model):
    """The checkable form of a strategy: within one run, the first call to `first` comes before
    the first call to `then` (a run that never calls `then` says nothing about the rule)."""

    first: str = Field(description="The tool (or action) to call first.")
    then: str = Field(description="The tool (or action) it must precede.")


class StrategyScope(_Model):
    """Where a strategy applies."""

    environment: str = Field(description="Environment of the runs it was distilled from.")
    task_features: dict[str, str] = Field(
        default_factory=dict, description="Task features of that family (domain, difficulty...)."
    )
    situation: str = Field(default="", description="The moment in a transcript it speaks to.")


class StrategyEvidence(_Model):
    """One run a strategy was distilled from."""

    trajectory_id: str = Field(description="The run.")
    task_id: str = Field(description="Its task.")
    message_index: int | None = Field(
        default=None, description="The message where the run followed or broke the rule."
    )
    kind: EvidenceKind = Field(description="success, failure or recovered.")
    decisive: bool = Field(
        default=False,
        description="A failure whose verified diagnosis puts its decisive error at this message.",
    )


class StrategySupport(_Model):
    """Success of runs that followed a rule vs runs that broke it, counted on one set of runs."""

    runs: int = Field(default=0, description="Runs the rule speaks to (they call `then`).")
    followed: int = Field(default=0, description="Runs that followed it.")
    followed_successes: int = Field(default=0, description="Of those, successes.")
    violated: int = Field(default=0, description="Runs that broke it.")
    violated_successes: int = Field(default=0, description="Of those, successes.")

    def lift(self) -> float | None:
        """Success rate when followed minus when broken (None without both kinds of run)."""
        if not self.followed or not self.violated:
            return None
        return self.followed_successes / self.followed - self.violated_successes / self.violated


class StrategyEffect(_Model):
    """A strategy's measured effect: on the runs it was distilled from (in-sample) and on
    runs of tasks it never saw (held out by task, the figure that decides whether it is kept)."""

    distilled: StrategySupport = Field(description="In-sample: the distillation runs.")
    held_out: StrategySupport = Field(description="Runs of held-out tasks.")
    held_out_tasks: int = Field(default=0, description="Distinct held-out tasks counted.")


class Strategy(_Model):
    """A short, actionable rule distilled from many runs of one task family. Versioned: an
    edit or a re-distillation stores a new version under the same `name`."""

    name: str = Field(description="Stable key across versions, e.g. `tau-retail/a-before-b`.")
    version: int = Field(default=1, ge=1, description="1 for the first version, then 2, 3...")
    text: str = Field(description="The rule, as guidance a policy can read.")
    scope: StrategyScope = Field(description="Where it applies.")
    rule: StrategyRule | None = Field(default=None, description="Its checkable form.")
    source: StrategySource = Field(description="contrast or llm.")
    evidence: list[StrategyEvidence] = Field(
        default_factory=list, description="The runs and messages it was distilled from."
    )
    effect: StrategyEffect | None = Field(default=None, description="Measured support.")
    created_at: float = Field(default=0.0, description="When this version was stored.")
