"""User simulators for conversational tasks: a scripted one (offline) and an LLM one.

The scripted user is driven by the task: it opens with the task's instruction, answers
identification questions from the facts the environment knows about the task's user,
confirms what the agent proposes, and stops (`USER_STOP`) once the environment's oracle
says the task is done, when success has become impossible, or after too many turns
without progress.

The LLM user plays the instruction with any chat model: it sees the conversation with
roles swapped (the agent's messages as its input) and no tools. A reply without words is
retried like a failed call; when every attempt fails the episode ends (`ModelCallFailed`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from trajforge.agents.base import EpisodeState
from trajforge.envs.base import USER_STOP, Oracle, UserFacts
from trajforge.models.base import ChatModel
from trajforge.models.retry import ModelCallFailed, ask_parsed
from trajforge.schema import Message, Task

IDENTIFY_WORDS = ("user id", "email", "zip", "your name", "full name", "identify", "verify")
CONFIRM_WORDS = ("confirm", "proceed", "would you like", "shall i", "should i", "yes", "go ahead")


class ScriptedUserConfig(BaseModel):
    """How patient the scripted user is."""

    max_idle_turns: int = Field(
        default=4, description="Replies without progress (same distance) before giving up."
    )


class ScriptedUser:
    """Offline user simulator driven by the task's instruction and the environment oracle."""

    name = "scripted-user"

    def __init__(self, config: ScriptedUserConfig | None = None) -> None:
        self.config = config or ScriptedUserConfig()
        self._last_distance: int | None = None
        self._idle = 0

    def opening(self, task: Task) -> Message:
        """The first user message of a conversation."""
        return Message(role="user", content=f"Hi, I need help. {task.instruction or ''}".strip())

    def reply(self, state: EpisodeState) -> Message:
        distance = state.env.distance() if isinstance(state.env, Oracle) else None
        if isinstance(state.env, Oracle):
            if distance == 0:
                return _say(f"Thank you, that is all I needed. {USER_STOP}")
            if distance is None:
                return _say(f"That is not what I asked for. Goodbye. {USER_STOP}")
        self._count_idle(distance)
        if self._idle > self.config.max_idle_turns:
            return _say(f"This is going nowhere, goodbye. {USER_STOP}")
        return _say(self._answer(state))

    def _count_idle(self, distance: int | None) -> None:
        self._idle = self._idle + 1 if distance == self._last_distance else 0
        self._last_distance = distance

    def _answer(self, state: EpisodeState) -> str:
        asked = _last_assistant_text(state.messages).lower()
        if any(word in asked for word in IDENTIFY_WORDS) and isinstance(state.env, UserFacts):
            facts = state.env.user_facts()
            return "Sure. " + "; ".join(f"my {key} is {value}" for key, value in facts.items())
        if any(word in asked for word in CONFIRM_WORDS):
            return "Yes, please go ahead."
        return f"Please help me with my request: {state.task.instruction or ''}".strip()


def _say(text: str) -> Message:
    return Message(role="user", content=text)


def _last_assistant_text(messages: list[Message]) -> str:
    for message in reversed(messages):
        if message.role == "assistant" and message.text():
            return message.text()
    return ""


USER_PROMPT = """You are a customer talking to a customer service agent. Play this role:

{instruction}

Rules: write only the customer's next message, one short turn at a time. Give information
only when asked. Do not invent facts the instructions do not give. When your request is
done, or cannot be done, write only {stop}."""


class LLMUserConfig(BaseModel):
    """The LLM user's prompt."""

    prompt: str = Field(default=USER_PROMPT, description="System prompt; {instruction}, {stop}.")
    greeting: str = Field(
        default="Hi! How can I help you today?", description="The agent's implied first words."
    )


class LLMUser:
    """A user simulator backed by a chat model (any OpenAI-compatible endpoint)."""

    def __init__(self, model: ChatModel, config: LLMUserConfig | None = None) -> None:
        self.model = model
        self.config = config or LLMUserConfig()
        self.name = f"llm-user:{model.name}"

    def opening(self, task: Task) -> Message:
        return self._ask(task, [])

    def reply(self, state: EpisodeState) -> Message:
        return self._ask(state.task, state.messages)

    def _ask(self, task: Task, messages: list[Message]) -> Message:
        prompt = self.config.prompt.format(instruction=task.instruction or "", stop=USER_STOP)
        history = [Message(role="system", content=prompt), _user(self.config.greeting)]
        history += [_swap(m) for m in messages if _spoken(m)]
        asked = ask_parsed(self.model, history, None, _words)
        if asked.value is None:
            raise ModelCallFailed(f"user model: {asked.failure}")
        return Message(role="user", content=asked.value)


def _words(reply: Message) -> str | None:
    """The user's turn: the reply's text, None when it says nothing (retried, then a failure:
    an empty user turn would read as silence the agent must answer)."""
    return reply.text().strip() or None


def _spoken(message: Message) -> bool:
    return message.role in ("user", "assistant") and bool(message.text())


def _user(text: str) -> Message:
    return Message(role="user", content=text)


def _swap(message: Message) -> Message:
    role: Any = "user" if message.role == "assistant" else "assistant"
    return Message(role=role, content=message.text())
