"""The LLM judge: a chat model localizes and diagnoses the decisive error.

Structured output travels as a function call: the judge offers one tool, `report_diagnosis`,
whose JSON schema is the answer's shape, so any OpenAI-compatible endpoint with tool calling
returns parseable arguments. A reply with the JSON in its text (optionally fenced) is accepted
too.

Modes:
- `all-at-once`: one call with the whole run; the judge names the decisive step.
- `step-by-step`: one call per agent step with the run up to it; the first step the judge
  marks as an error is the decisive one (at most `max_steps` calls).

Evidence first (default): before it is asked, the judge gets the run's validation log
(`trajforge.diagnose.validation`: tool errors, contradicted claims, schema and policy
violations, repeated actions, unsupported final answers, computed without a model) and must
cite the findings it relies on by id in `evidence_ids`. An answer that cites an id not in
the log it was shown, cites a message outside the run, or cites nothing while the log has
findings, is invalid: all-at-once gives no step (`details.invalid`), step-by-step skips
that answer. Without the log, an answer whose `evidence` is not a list or cites a message
outside the run is invalid the same way. The judge's own `confidence` (0-1) is kept on the
diagnosis.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, Field

from trajforge.diagnose.evidence import speaker
from trajforge.diagnose.model import Correction, Diagnosis, Evidence
from trajforge.diagnose.taxonomy import CATEGORIES, taxonomy_text
from trajforge.diagnose.transcript import transcript
from trajforge.diagnose.validation import Finding, render, validation_log
from trajforge.models.base import ChatModel
from trajforge.models.retry import Asked, ask_parsed
from trajforge.models.structured import function_answer
from trajforge.schema import Message, ToolCall, Trajectory

REPORT_TOOL = "report_diagnosis"


JudgeMode = Literal["all-at-once", "step-by-step"]


class JudgeConfig(BaseModel):
    """How the judge reads a run."""

    mode: JudgeMode = Field(
        default="all-at-once", description="One call for the whole run, or one per agent step."
    )
    max_chars: int = Field(default=3000, description="Longer messages are shortened.")
    max_steps: int = Field(default=40, description="Step-by-step: at most this many calls.")
    evidence_first: bool = Field(
        default=True, description="Show the validation log and require citations of it."
    )


def report_tool(evidence_first: bool = False) -> dict[str, Any]:
    """The function schema the judge answers through."""
    evidence = {
        "type": "object",
        "properties": {
            "message_index": {"type": "integer"},
            "quote": {"type": "string", "description": "A short exact excerpt."},
            "note": {"type": "string"},
        },
        "required": ["message_index"],
    }
    correction = {
        "type": "object",
        "properties": {
            "tool": {"type": "string", "description": "Tool to call instead (if a call)."},
            "arguments": {"type": "object"},
            "message": {"type": "string", "description": "Message to send instead."},
        },
    }
    properties = {
        "error": {"type": "boolean", "description": "Step-by-step: is this step the error?"},
        "step": {"type": "integer", "description": "Message index of the decisive error."},
        "category": {"type": "string", "enum": list(CATEGORIES)},
        "explanation": {"type": "string", "description": "Cite messages as [index]."},
        "evidence": {"type": "array", "items": evidence},
        "correction": correction,
        "confidence": {"type": "number", "description": "Chance (0-1) the step is right."},
    }
    required = ["step"]
    if evidence_first:
        properties["evidence_ids"] = {
            "type": "array",
            "items": {"type": "string"},
            "description": "Ids (E1, E2...) of the validation-log findings you rely on.",
        }
        required.append("evidence_ids")
    return {
        "type": "function",
        "function": {
            "name": REPORT_TOOL,
            "description": "Report the decisive error of the run.",
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


SYSTEM = (
    "You find the decisive error in a failed run of a tool-using agent: the first agent "
    "message after which the task could no longer succeed (or, if every step was fine, the "
    "agent's last message, where it stopped with work missing). Answer by calling "
    f"{REPORT_TOOL}. Categories:\n{taxonomy_text()}"
)


def parse_report(reply: Message) -> dict[str, Any] | None:
    """The judge's answer as a dict, from the report call or JSON text; None if absent."""
    return function_answer(reply, REPORT_TOOL)


class LLMJudge:
    """Localize and diagnose with a chat model (see module docstring)."""

    name = "llm"

    def __init__(
        self,
        model: ChatModel | None = None,
        mode: JudgeMode = "all-at-once",
        config: JudgeConfig | None = None,
    ) -> None:
        if model is None:
            from trajforge.models.openai_compat import OpenAICompatibleModel

            model = OpenAICompatibleModel()
        self.model = model
        self.config = config or JudgeConfig(mode=mode)

    def check(self, traj: Trajectory) -> None:
        return None

    def localize(self, traj: Trajectory) -> Diagnosis | None:
        findings = self._findings(traj)
        if self.config.mode == "step-by-step":
            return self._step_by_step(traj, findings)
        upto = len(traj.messages)
        asked = self._ask(traj, upto, "Which message is the decisive error?", findings)
        if asked.failure:
            return failed_call(traj, asked.failure, self.model.name)
        report = asked.value
        invalid = self._invalid(traj, report, findings, upto)
        if invalid:
            return _invalid_answer(traj, report, invalid, self.model.name)
        return to_diagnosis(traj, report, self.model.name, findings)

    def _findings(self, traj: Trajectory) -> list[Finding] | None:
        if not self.config.evidence_first:
            return None
        from trajforge.diagnose.forking import tool_schemas

        return validation_log(traj, tool_schemas(traj))

    def _invalid(self, traj, report, findings, upto: int) -> str | None:
        if report is None:
            return None
        if findings is None:
            return evidence_problem(report, traj)
        return citation_problem(report, [f for f in findings if f.message_index < upto], traj)

    def _step_by_step(self, traj: Trajectory, findings: list[Finding] | None) -> Diagnosis | None:
        steps = [i for i, m in enumerate(traj.messages) if m.role == "assistant"]
        rejected: list[dict[str, Any]] = []
        failures: list[str] = []
        for index in steps[: self.config.max_steps]:
            question = (
                f"Is message {index} (the last one) the decisive error? Set error=true and "
                f"step={index} if it is, error=false otherwise."
            )
            asked = self._ask(traj, index + 1, question, findings)
            if asked.failure:
                failures.append(f"step {index}: {asked.failure}")
                continue
            report = asked.value
            if not (report and report.get("error") is True):
                continue
            invalid = self._invalid(traj, report, findings, index + 1)
            if invalid:
                rejected.append({"step": index, "why": invalid})
                continue
            report["step"] = index
            found = to_diagnosis(traj, report, self.model.name, findings)
            found.details["rejected_answers"] = rejected
            found.details["failed_calls"] = failures
            return found
        if failures:
            return failed_call(traj, "; ".join(failures), self.model.name)
        return None

    def _ask(
        self, traj: Trajectory, upto: int, question: str, findings: list[Finding] | None
    ) -> Asked[dict[str, Any]]:
        evidence = ""
        if findings is not None:
            evidence = (
                "\n\nValidation log (computed without a model; cite the ids you rely on in "
                f"evidence_ids, only ids listed here):\n{render(findings, upto)}"
            )
        prompt = (
            f"Task: {traj.task.instruction or traj.task.id}\n\nRun:\n"
            f"{transcript(traj.messages[:upto], self.config.max_chars)}{evidence}\n\n"
            f"The run failed. {question}"
        )
        messages = [Message(role="system", content=SYSTEM), Message(role="user", content=prompt)]
        tool = report_tool(findings is not None)
        return ask_parsed(self.model, messages, [tool], parse_report)


def citation_problem(report: dict[str, Any], shown: list[Finding], traj: Trajectory) -> str | None:
    """Why an evidence-first answer is invalid, or None when its citations hold."""
    cited = report.get("evidence_ids")
    if cited is None:
        cited = []
    if not isinstance(cited, list) or not all(isinstance(c, str) for c in cited):
        return f"evidence_ids is not a list of ids: {cited!r}"
    known = {f.id for f in shown}
    missing = [c for c in cited if c.strip().upper() not in known]
    if missing:
        return f"cites {', '.join(missing)}, not in the validation log it was shown"
    if known and not cited:
        return "cites no finding although the validation log has findings"
    return evidence_problem(report, traj)


def evidence_problem(report: dict[str, Any], traj: Trajectory) -> str | None:
    """Why the answer's `evidence` is unusable (not a list, or a message outside the run)."""
    evidence = report.get("evidence")
    if evidence is None:
        return None
    if not isinstance(evidence, list):
        return f"evidence is not a list of citations: {evidence!r}"
    for item in evidence:
        index = item.get("message_index") if isinstance(item, dict) else None
        if isinstance(index, int) and not 0 <= index < len(traj.messages):
            return f"cites message {index}, which is not in the run"
    return None


def failed_call(traj: Trajectory, why: str, judge: str) -> Diagnosis:
    """The record of a run the model could not diagnose: no step, the reason, and a flag."""
    return Diagnosis(
        trajectory_id=traj.id,
        method="llm",
        step=None,
        explanation=f"judge {judge}: no diagnosis: {why}",
        details={"judge": judge, "failed_call": why},
    )


def _invalid_answer(
    traj: Trajectory, report: dict[str, Any] | None, why: str, judge: str
) -> Diagnosis:
    return Diagnosis(
        trajectory_id=traj.id,
        method="llm",
        step=None,
        explanation=f"judge {judge}: answer invalid: {why}",
        details={"judge": judge, "report": report, "invalid": why},
    )


def to_diagnosis(
    traj: Trajectory,
    report: dict[str, Any] | None,
    judge: str,
    findings: list[Finding] | None = None,
) -> Diagnosis:
    """A diagnosis from the judge's answer; an unusable answer gives step None and why."""
    step = report.get("step") if report else None
    if report is None or not isinstance(step, int) or not 0 <= step < len(traj.messages):
        why = "no structured answer" if report is None else f"step {step!r} is not in the run"
        return Diagnosis(
            trajectory_id=traj.id,
            method="llm",
            step=None,
            explanation=f"judge {judge}: {why}",
            details={"judge": judge, "report": report},
        )
    category = report.get("category")
    known = isinstance(category, str) and category in CATEGORIES  # a list is not a category
    return Diagnosis(
        trajectory_id=traj.id,
        method="llm",
        step=step,
        agent=speaker(traj.messages[step]),
        category=category if known else None,
        explanation=str(report.get("explanation") or ""),
        evidence=_evidence(report.get("evidence")),
        correction=_correction(report.get("correction")),
        omission=step == max(traj.assistant_indices(), default=-1) and not _acts(traj, step),
        confidence=_confidence(report.get("confidence")),
        details={"judge": judge} | _cited(report, findings),
    )


def _confidence(raw: Any) -> float | None:
    if isinstance(raw, int | float) and not isinstance(raw, bool) and 0 <= raw <= 1:
        return float(raw)
    return None


def _cited(report: dict[str, Any], findings: list[Finding] | None) -> dict[str, Any]:
    if findings is None:
        return {}
    by_id = {f.id: f for f in findings}
    cited = [by_id[c.strip().upper()] for c in report.get("evidence_ids") or []]
    return {
        "evidence_ids": [f.id for f in cited],
        "cited_findings": [f.model_dump() for f in cited],
    }


def _acts(traj: Trajectory, step: int) -> bool:
    return bool(traj.messages[step].tool_calls)


def _evidence(raw: Any) -> list[Evidence]:
    items = []
    for entry in raw if isinstance(raw, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("message_index"), int):
            items.append(
                Evidence(
                    message_index=entry["message_index"],
                    quote=str(entry.get("quote") or ""),
                    note=str(entry.get("note") or ""),
                )
            )
    return items


def _correction(raw: Any) -> Correction | None:
    if not isinstance(raw, dict):
        return None
    if isinstance(raw.get("tool"), str) and raw["tool"]:
        arguments = raw.get("arguments") if isinstance(raw.get("arguments"), dict) else {}
        call = ToolCall(
            id="correction", name=raw["tool"], arguments=orjson.dumps(arguments).decode()
        )
        return Correction(tool_call=call, source="llm")
    if isinstance(raw.get("message"), str) and raw["message"]:
        return Correction(message=raw["message"], source="llm")
    return None
