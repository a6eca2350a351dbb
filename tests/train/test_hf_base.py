"""`train sft` with a Hugging Face base model: its tokenizer, chat template and mask."""

from __future__ import annotations

from pathlib import Path

from tests.train.conftest import SMALL, teacher_rows

from trajforge.serve.codec import HFCodec
from trajforge.serve.student import Student
from trajforge.train.sft import train_sft

TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}"
    "<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _local_base(path: Path, texts: list[str]) -> Path:
    """A small byte-level BPE tokenizer with a chat template and a random Llama, saved."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<|pad|>", "<|end|>", "<|user|>", "<|assistant|>", "<|tool|>", "<|system|>"]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tokenizer.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<|pad|>",
                                   eos_token="<|end|>")  # fmt: skip
    fast.chat_template = TEMPLATE
    fast.save_pretrained(path)
    size = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1}
    shape = LlamaConfig(vocab_size=len(fast), num_attention_heads=2, num_key_value_heads=2, **size)
    LlamaForCausalLM(shape).save_pretrained(path)
    return path


def test_hf_base_masks_assistant_turns_and_trains(tmp_path: Path) -> None:
    rows = [(r["messages"], r["tools"]) for r in teacher_rows(range(4))]
    texts = [
        str(m.get("content") or "") + str(m.get("tool_calls") or "") for r in rows for m in r[0]
    ]
    base = _local_base(tmp_path / "base", texts)
    from transformers import AutoTokenizer

    codec = HFCodec(AutoTokenizer.from_pretrained(base))
    ids, mask = codec.encode(*rows[0])
    learned = codec.tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert learned.count("<tool_call>") == sum(m["role"] == "assistant" for m in rows[0][0])
    assert "You arrive" not in learned and "Your task" not in learned
    config = SMALL.model_copy(update={"model": str(base), "steps": 4, "save_every": 4})
    out = train_sft(rows, tmp_path / "ckpt", config)
    student = Student(out)
    assert isinstance(student.codec, HFCodec)
    (answer,) = student.generate([student.codec.prompt(*rows[0][:1], rows[0][1])], 4)
    assert len(answer.token_ids) == len(answer.logprobs) <= 4
