"""Strategy candidates written by a chat model (any OpenAI-compatible endpoint).

The model sees the action sequences of successful and failed runs of one family and the action
vocabulary, and answers one JSON object per line: `{"first": A, "then": B, "text": "..."}`.
Lines that are not such an object, or that name actions outside the vocabulary, are counted
and dropped; a model that fails every attempt fails the distillation (`DistillationFailed`).
"""

from __future__ import annotations

import orjson

from trajforge.errors import UserError
from trajforge.models.base import ChatModel
from trajforge.models.retry import ask_reply
from trajforge.schema import Message, StrategyRule, StrategySource
from trajforge.strategies.candidates import Candidate, FamilyRun

PROMPT = (
    "Below are action sequences of runs of one family of tasks, each marked SUCCESS or "
    "FAILURE. Find ordering rules that successful runs follow and failed runs break. Answer "
    "with one JSON object per line and nothing else: "
    '{"first": "<action>", "then": "<action>", "text": "<the rule as advice to an agent>"}, '
    "meaning: do `first` before the first `then`. Use only these actions: "
)


class DistillationFailed(UserError):
    """The distilling model failed every attempt."""


def _sequence(item: FamilyRun) -> str:
    ordered = sorted(item.first, key=item.first.__getitem__)
    return f"{'SUCCESS' if item.success else 'FAILURE'}: {' -> '.join(ordered)}"


class LLMProposer:
    """Asks `model` for rules over at most `max_runs` runs (successes and failures alike)."""

    source: StrategySource = "llm"

    def __init__(self, model: ChatModel, max_runs: int = 20) -> None:
        self.model = model
        self.max_runs = max_runs
        self.rejected_lines = 0

    def prompt(self, runs: list[FamilyRun]) -> list[Message]:
        vocabulary = sorted({key for item in runs for key in item.first})
        wins = [item for item in runs if item.success][: self.max_runs // 2]
        losses = [item for item in runs if not item.success][: self.max_runs - len(wins)]
        lines = [_sequence(item) for item in wins + losses]
        text = PROMPT + ", ".join(vocabulary) + "\n\n" + "\n".join(lines)
        return [Message(role="user", content=text)]

    def propose(self, runs: list[FamilyRun]) -> list[Candidate]:
        vocabulary = {key for item in runs for key in item.first}
        asked = ask_reply(self.model, self.prompt(runs), None)
        if asked.value is None:
            raise DistillationFailed(f"the distilling model failed: {asked.failure}")
        candidates = []
        for line in asked.value.message.text().splitlines():
            candidate = self._parse(line.strip(), vocabulary)
            if candidate is not None:
                candidates.append(candidate)
            elif line.strip():
                self.rejected_lines += 1
        return candidates

    def _parse(self, line: str, vocabulary: set[str]) -> Candidate | None:
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(value, dict):
            return None
        first, then, text = value.get("first"), value.get("then"), value.get("text")
        if first not in vocabulary or then not in vocabulary or first == then:
            return None
        if not isinstance(text, str) or not text.strip():
            return None
        return Candidate(StrategyRule(first=first, then=then), text.strip(), self.source)
