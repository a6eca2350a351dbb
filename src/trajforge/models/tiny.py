"""A tiny real causal LM behind the mock server, so that logprobs are real model numbers.

Needs the `train` extra (torch, transformers, tokenizers). The tokenizer is a byte-level BPE
trained here on `TINY_CORPUS` (so any text encodes, nothing is downloaded); the model is a
small Llama-style network initialised from a seed. Both are deterministic: two processes that
build the backend with the same config get the same tokens and the same weights, which is
what `python -m trajforge.export.tiny_check` relies on to recompute logprobs.

The scripted reply still decides *what* is said; the model scores each of its tokens given
the whole prompt (teacher forcing), exactly as a trainer scores a sampled completion.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from pydantic import BaseModel, Field

from trajforge.errors import UserError
from trajforge.models.mock_tokens import SPECIAL_TOKENS

TINY_CORPUS = """
The agent reads the repository, runs a command, looks at the output and decides what to do next.
It lists files with ls, prints them with cat, searches with grep and edits them with sed.
When a test fails, the agent reads the traceback, finds the line at fault and fixes the code.
A careful agent runs the tests again after every change and submits only when they pass.
The user asks for a refund, the assistant looks up the order, checks the policy and answers.
Tool calls carry a name and JSON arguments such as {"command": "python -m pytest -q"}.
def add(a, b):
    return a + b
for line in open("log.txt"):
    if "error" in line:
        print(line.strip())
Errors happen: a command times out, a file is missing, a server answers 503 and recovers later.
Every step is a message: system, user, assistant and tool messages follow one another.
The returncode is 0 when the command succeeded and the output shows what it printed.
echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT ends the run once the work is done.
"""


class TinyModelConfig(BaseModel):
    """Shape and seed of the tiny model and its tokenizer."""

    seed: int = Field(default=0, description="Seed of the weight initialisation.")
    vocab_size: int = Field(default=800, description="BPE vocabulary size to train for.")
    hidden_size: int = Field(default=64, description="Width of the network.")
    layers: int = Field(default=2, description="Number of transformer layers.")
    heads: int = Field(default=4, description="Attention heads per layer.")
    max_positions: int = Field(default=32768, description="Longest sequence it accepts.")


def _require_train_extra() -> None:
    try:
        import tokenizers  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise UserError(
            f"the tiny model needs the train extra ({exc.name} is missing): "
            "pip install 'trajforge[train]'"
        ) from None


def train_tokenizer(config: TinyModelConfig):
    """A byte-level BPE tokenizer trained on `TINY_CORPUS`, with the chat special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TINY_CORPUS.splitlines(), trainer=trainer)
    return tokenizer


def build_model(config: TinyModelConfig, vocab_size: int):
    """The randomly initialised causal LM (same seed, same weights)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(config.seed)
    shape = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.hidden_size * 2,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        num_key_value_heads=config.heads,
        max_position_embeddings=config.max_positions,
    )
    return LlamaForCausalLM(shape).eval()


class TinyBackend:
    """`TokenBackend` over the tiny model: BPE tokens, logprobs from a forward pass."""

    name = "trajforge-tiny"

    def __init__(self, config: TinyModelConfig | None = None) -> None:
        _require_train_extra()
        self.config = config or TinyModelConfig()
        self.tokenizer = train_tokenizer(self.config)
        self.model = build_model(self.config, self.tokenizer.get_vocab_size())

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids if text else []

    def piece(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id], skip_special_tokens=False)

    def special(self, token: str) -> int:
        return self.tokenizer.token_to_id(token)

    def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        """Log-probability of each completion token given all tokens before it."""
        import torch

        if not completion_ids:
            return []
        prompt = list(prompt_ids) or [self.special("<|pad|>")]
        ids = torch.tensor([[*prompt, *completion_ids]])
        with torch.no_grad():
            logits = self.model(ids).logits[0, len(prompt) - 1 : -1]
            logprobs = torch.log_softmax(logits.float(), dim=-1)
        picked = logprobs.gather(1, torch.tensor(completion_ids).unsqueeze(1)).squeeze(1)
        return [float(x) for x in picked]


@cache
def load_tiny_backend(seed: int = 0) -> TinyBackend:
    """The tiny backend for a seed (built once per process)."""
    return TinyBackend(TinyModelConfig(seed=seed))
