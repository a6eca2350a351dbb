"""Chat codecs: chat messages <-> token ids with a loss mask, and generated ids -> a message.

Two codecs, one interface:

- `CompactCodec` (the `tiny` preset): a word-level vocabulary built from the training data
  and a compact template (a name with its number, such as `cabinet 2`, is one word: entities
  are copied as one token). Each message is a role token, its words and `<|end|>`; a tool call
  is `<|call|> name <|arg|> value <|arg|> value`, the values in the order of the tool's
  schema properties, then any others as given (so `put(object="apple 1",
  receptacle="countertop 1")` costs 8 tokens, the tool schemas never enter the prompt, and a
  generated call with values past its schema's reads back as the tokens it was). System
  messages are left out: they are the same in every episode of an environment and carry
  nothing to learn from; only what is appended to one for this episode is kept, as a
  `<|system|>` turn, so a model can be trained to read it: guidance (after `## Guidance for
  this task`, as guided recovery writes it) and retrieved strategies (after `## Strategies
  that worked on similar tasks`, as `agents.llm.with_strategies` writes them).
- `HFCodec`: any Hugging Face tokenizer with a chat template. When the template renders tools
  itself (it mentions `tools`), tools are passed to it and calls are read back from JSON
  objects `{"name": ..., "arguments": {...}}` in the generated text; otherwise (SmolLM2's
  template) the chat is first written in the text convention of `trajforge.models.tool_text`
  (tools in the system prompt, `<tool_call>{json}</tool_call>` lines, tool messages), and
  generations are parsed by the same module, malformed calls listed in `tool_call_errors`.

`encode(messages, tools)` returns ids and a mask that is 1 exactly on the tokens of assistant
messages meant to be learned: an assistant message with `"weight": 0` (the OpenAI
fine-tuning field) stays in the context but is not a target.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any, Literal, Protocol

import orjson

from trajforge.agents.llm import STRATEGIES_HEADER
from trajforge.models import tool_text
from trajforge.models.tool_text import text_of
from trajforge.serve.memo import JsonMemo

SPECIALS = (
    "<|pad|>",
    "<|unk|>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|tool|>",
    "<|end|>",
    "<|call|>",
    "<|arg|>",
)
_WORD = re.compile(r"[^\W\d]+ \d+\b|\w+|[^\w\s]")
"""Words, with a name and its number as one token (`cabinet 2`), and single symbols."""
GUIDANCE_HEADER = "## Guidance for this task"
"""What guided recovery puts before the guidance it appends to a system prompt."""
_APPENDED = re.compile(f"({re.escape(GUIDANCE_HEADER)}|{re.escape(STRATEGIES_HEADER)})")
"""The headers of what is appended to a system prompt for one episode (kept by `tiny`)."""
ENCODED_BYTES = 32 * 2**20
"""Bytes of messages (as JSON) whose ids `CompactCodec.prompt` keeps (`JsonMemo`): an agent
sends its whole conversation at every turn. On the 608 requests of 32
household RL episodes (21 messages each on average), encoding every message of every request
cost 0.32 ms of CPU a request, and 0.07 with the messages kept (each new one encoded once)."""


class Codec(Protocol):
    """Turns chats into model tokens and generated tokens back into messages."""

    eos_id: int
    pad_id: int

    def encode(
        self, messages: Sequence[dict], tools: Sequence[dict]
    ) -> tuple[list[int], list[int]]:
        """Token ids of a whole chat and its loss mask (1 on learned assistant tokens)."""
        ...

    def prompt(self, messages: Sequence[dict], tools: Sequence[dict]) -> list[int]:
        """Token ids of a chat followed by the assistant generation prompt."""
        ...

    def decode(self, ids: Sequence[int], tools: Sequence[dict]) -> dict[str, Any]:
        """The assistant message of generated ids: its content and, only when `tools` offers
        any, the tool calls read from it."""
        ...

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """Text of each token."""
        ...

    def visible_text(self, ids: Sequence[int], tools: Sequence[dict]) -> str:
        """The content a stream may show of the ids generated so far: the text before any
        tool call, without a tail that could still begin one (or an unfinished character).
        Growing `ids` only ever appends to it."""
        ...

    def to_json(self) -> dict[str, Any]:
        """What a checkpoint's manifest stores to rebuild (and identify) the codec."""
        ...


def learned(message: dict) -> bool:
    """An assistant turn that is a training target (`weight` absent or non-zero)."""
    return message.get("role") == "assistant" and message.get("weight", 1) != 0


def arguments_of(call: dict) -> dict[str, Any]:
    """Tool-call arguments as a dict, whether stored as an object or a JSON string."""
    function = call.get("function", call)
    raw = function.get("arguments") or {}
    if isinstance(raw, str):
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return {"raw": raw}
    return raw if isinstance(raw, dict) else {"value": raw}


def schema_params(tools: Sequence[dict]) -> dict[str, list[str]]:
    """Parameter names of each tool, in schema order."""
    params = {}
    for tool in tools:
        function = tool.get("function", tool)
        properties = (function.get("parameters") or {}).get("properties") or {}
        params[function.get("name", "")] = list(properties)
    return params


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def system_guidance(message: Mapping[str, Any]) -> str | None:
    """The guidance and strategies appended to a system message, without their headers, if
    any (the compact template keeps only that part of a system prompt)."""
    if message.get("role") != "system":
        return None
    parts = _APPENDED.split(text_of(message.get("content")))
    if len(parts) == 1:
        return None
    return "\n\n".join(block.strip() for block in parts[2::2])


class CompactCodec:
    """The `tiny` preset's word-level codec (see module docstring)."""

    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab
        self.inverse = {index: word for word, index in vocab.items()}
        self.pad_id = vocab["<|pad|>"]
        self.unk_id = vocab["<|unk|>"]
        self.eos_id = vocab["<|end|>"]
        self._encoded: JsonMemo[list[int]] = JsonMemo(ENCODED_BYTES)
        """Ids of messages `prompt` met, by the message's JSON and the tools' order."""

    @classmethod
    def build(cls, chats: Iterable[tuple[Sequence[dict], Sequence[dict]]]) -> CompactCodec:
        """A vocabulary of every word in the chats (and every tool name), specials first."""
        vocab = {token: index for index, token in enumerate(SPECIALS)}
        for messages, tools in chats:
            for token in cls._all_words(messages, tools):
                vocab.setdefault(token, len(vocab))
        return cls(vocab)

    @staticmethod
    def _all_words(messages: Sequence[dict], tools: Sequence[dict]) -> Iterable[str]:
        yield from schema_params(tools)
        for message in messages:
            if message.get("role") == "system":
                yield from words(system_guidance(message) or "")
                continue
            yield from words(text_of(message.get("content")))
            for call in message.get("tool_calls") or []:
                yield from words(call.get("function", call).get("name", ""))
                for value in arguments_of(call).values():
                    yield from words(str(value))

    def _ids(self, text: str) -> list[int]:
        return [self.vocab.get(word, self.unk_id) for word in words(text)]

    def _special(self, token: str) -> int:
        return self.vocab[token]

    def _message(self, message: dict, order: dict[str, list[str]]) -> list[int]:
        """`order`: each tool's parameters in schema order (`schema_params`)."""
        role = message.get("role", "user")
        if role == "assistant":
            return [self._special("<|assistant|>"), *self._completion(message, order)]
        if role == "system":
            guidance = system_guidance(message)
            if guidance is None:
                return []
            return [self._special("<|system|>"), *self._ids(guidance), self.eos_id]
        token = f"<|{role}|>" if f"<|{role}|>" in self.vocab else "<|user|>"
        return [self._special(token), *self._ids(text_of(message.get("content"))), self.eos_id]

    def _completion(self, message: dict, order: dict[str, list[str]]) -> list[int]:
        ids = self._ids(text_of(message.get("content")))
        for call in message.get("tool_calls") or []:
            name = call.get("function", call).get("name", "")
            ids += [self._special("<|call|>"), *self._ids(name)]
            for value in _ordered_values(arguments_of(call), order.get(name) or []):
                ids += [self._special("<|arg|>"), *self._ids(str(value))]
        return [*ids, self.eos_id]

    def encode(
        self, messages: Sequence[dict], tools: Sequence[dict]
    ) -> tuple[list[int], list[int]]:
        ids: list[int] = []
        mask: list[int] = []
        order = schema_params(tools)
        for message in messages:
            part = self._message(message, order)
            ids += part
            flag = 1 if learned(message) else 0
            mask += (
                [0] + [flag] * (len(part) - 1)
                if message.get("role") == "assistant"
                else [0] * len(part)
            )
        return ids, mask

    def prompt(self, messages: Sequence[dict], tools: Sequence[dict]) -> list[int]:
        ids: list[int] = []
        order = schema_params(tools)
        tools_key = b"\n" + orjson.dumps(order)  # orjson writes no newline
        for message in messages:
            ids += self._encoded.get(message, partial(self._message, message, order), tools_key)
        return [*ids, self._special("<|assistant|>")]

    def completion_ids(self, message: dict, tools: Sequence[dict]) -> list[int]:
        """Ids of an assistant message as a completion (for scoring a given answer)."""
        return self._completion(message, schema_params(tools))

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.inverse.get(i, "<|unk|>") for i in ids]

    def visible_text(self, ids: Sequence[int], tools: Sequence[dict]) -> str:
        words_before: list[str] = []
        for token in self.pieces(ids):
            if token in ("<|end|>", "<|call|>", "<|arg|>"):
                break
            words_before.append(token)
        return _join(words_before)

    def decode(self, ids: Sequence[int], tools: Sequence[dict]) -> dict[str, Any]:
        """Words up to `<|end|>`; `<|call|>` / `<|arg|>` segments become tool calls (with no
        tools offered they are dropped: the content is the words before the first one)."""
        parts: list[list[str]] = [[]]
        markers: list[str] = [""]
        for token in self.pieces(ids):
            if token == "<|end|>":
                break
            if token in ("<|call|>", "<|arg|>"):
                parts.append([])
                markers.append(token)
            else:
                parts[-1].append(token)
        content = _join(parts[0])
        calls: list[dict[str, Any]] = []
        order = schema_params(tools)
        for marker, part in zip(markers[1:], parts[1:], strict=True):
            if marker == "<|call|>":
                calls.append({"name": _spelled(part), "values": []})
            elif calls:
                calls[-1]["values"].append(_join(part))
        message: dict[str, Any] = {"role": "assistant", "content": content or None}
        if calls and tools:
            message["tool_calls"] = [_tool_call(call, order) for call in calls]
        return message

    def to_json(self) -> dict[str, Any]:
        return {"kind": "compact", "vocab": self.vocab}


def _join(tokens: list[str]) -> str:
    """Words back to text: spaces between words, none before punctuation."""
    text = ""
    for token in tokens:
        if text and (token[0].isalnum() or token[0] == "_"):
            text += " "
        text += token
    return text


def _spelled(name: list[str]) -> str:
    """A generated tool name as text that reads back as the same words: joined as one (a
    name such as `look-around`), or with spaces between words (the student sometimes
    generates several object names where one tool name belongs; joined as one they read
    back as other words, a retokenization drift point)."""
    joined = "".join(name)
    return joined if words(joined) == name else _join(name)


def _ordered_values(arguments: dict[str, Any], schema: list[str]) -> list[Any]:
    """A call's argument values: the schema's parameters in its order, then any others in
    the order given (a generated call's extra values, which `decode` names `arg<n>`, so a
    decoded call encodes to the tokens it was decoded from)."""
    named = [arguments[key] for key in schema if key in arguments]
    return named + [value for key, value in arguments.items() if key not in schema]


def _tool_call(call: dict, order: dict[str, list[str]]) -> dict[str, Any]:
    keys = order.get(call["name"], [])
    values = call["values"]
    arguments = {key: value for key, value in zip(keys, values, strict=False)}
    for extra, value in enumerate(values[len(keys) :]):
        arguments[f"arg{extra + len(keys)}"] = value
    return {"name": call["name"], "arguments": arguments}


_JSON_CALL = re.compile(r"\{.*\}", re.DOTALL)
ToolFormat = Literal["template", "text"]


def default_tool_format(tokenizer: Any) -> ToolFormat:
    """`template` when the chat template renders tools itself, else the `text` convention."""
    return "template" if "tools" in str(tokenizer.chat_template or "") else "text"


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A short hash of a tokenizer's vocabulary, special tokens and chat template."""
    import hashlib

    vocab = sorted(tokenizer.get_vocab().items())
    specials = [tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.bos_token_id]
    blob = orjson.dumps([vocab, specials, str(tokenizer.chat_template or "")])
    return hashlib.sha256(blob).hexdigest()[:16]


class HFCodec:
    """A Hugging Face tokenizer and its chat template (see module docstring)."""

    def __init__(self, tokenizer: Any, tool_format: ToolFormat | None = None) -> None:
        self.tokenizer = tokenizer
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        self.tool_format: ToolFormat = tool_format or default_tool_format(tokenizer)
        self.fingerprint = tokenizer_fingerprint(tokenizer)

    def _render(
        self, messages: Sequence[dict], tools: Sequence[dict], generation: bool
    ) -> list[int]:
        if self.tool_format == "text":
            chat, given = tool_text.render_messages(messages, tools), None
        else:
            chat, given = [_hf_message(m) for m in messages], list(tools) or None
        ids = self.tokenizer.apply_chat_template(
            chat, tools=given, tokenize=True, add_generation_prompt=generation
        )
        return list(ids["input_ids"] if isinstance(ids, Mapping) else ids)

    def encode(
        self, messages: Sequence[dict], tools: Sequence[dict]
    ) -> tuple[list[int], list[int]]:
        """Whole-chat ids; the mask marks the tokens each learned assistant turn adds, up to
        and including its end-of-turn token (what the template puts after it is not learned)."""
        ids = self._render(messages, tools, generation=False)
        mask = [0] * len(ids)
        for index, message in enumerate(messages):
            if not learned(message):
                continue
            start = len(self._render(messages[:index], tools, generation=True))
            end = len(self._render(messages[: index + 1], tools, generation=False))
            ends = [i for i in range(start, end) if ids[i] == self.eos_id]
            end = ends[-1] + 1 if ends else end
            mask[start:end] = [1] * (end - start)
        return ids, mask

    def prompt(self, messages: Sequence[dict], tools: Sequence[dict]) -> list[int]:
        return self._render(messages, tools, generation=True)

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return list(self.tokenizer.batch_decode([[i] for i in ids]))

    def visible_text(self, ids: Sequence[int], tools: Sequence[dict]) -> str:
        text = self.tokenizer.decode(list(ids), skip_special_tokens=True)
        opening = tool_text.CALL_OPEN if self.tool_format == "text" else "{"
        return _before_call(text.rstrip("\ufffd"), opening)

    def decode(self, ids: Sequence[int], tools: Sequence[dict]) -> dict[str, Any]:
        text = self.tokenizer.decode(list(ids), skip_special_tokens=True)
        if self.tool_format == "text":
            return _text_reply(tool_text.parse_reply(text, tools))
        calls = _json_calls(text) if tools else []
        message: dict[str, Any] = {"role": "assistant", "content": None if calls else text}
        if calls:
            message["tool_calls"] = calls
        return message

    def to_json(self) -> dict[str, Any]:
        return {"kind": "hf", "tools": self.tool_format, "tokenizer": self.fingerprint}


def _before_call(text: str, opening: str) -> str:
    """`text` up to where a call opens, less a tail that may be the start of `opening`."""
    cut = text.find(opening)
    if cut >= 0:
        return text[:cut]
    for size in range(min(len(opening) - 1, len(text)), 0, -1):
        if opening.startswith(text[-size:]):
            return text[:-size]
    return text


def _text_reply(parsed: tool_text.ParsedReply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if parsed.calls:
        message["tool_calls"] = parsed.calls
    if parsed.errors:
        message[tool_text.ERRORS_FIELD] = parsed.errors
    return message


def _json_calls(text: str) -> list[dict[str, Any]]:
    """Tool calls written as JSON objects with a `name` in generated text."""
    calls = []
    for match in _JSON_CALL.finditer(text):
        try:
            value = orjson.loads(match.group(0))
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict) and "name" in value:
            calls.append({"name": value["name"], "arguments": arguments_of(value)})
    return calls


def _hf_message(message: dict) -> dict:
    data = {k: v for k, v in message.items() if k != "weight"}
    if message.get("tool_calls"):
        data["tool_calls"] = [
            {
                "type": "function",
                "function": {
                    "name": c.get("function", c).get("name"),
                    "arguments": arguments_of(c),
                },
            }
            for c in message["tool_calls"]
        ]
    data["content"] = text_of(message.get("content"))
    return data
