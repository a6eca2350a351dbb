"""The GRPO update on a large vocabulary: logprobs only at model tokens, minibatches in passes,
the same figures and gradients as the plain computation."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from trajforge.train.rl.advantages import advantage_signal
from trajforge.train.rl.grpo import (
    TrainSequence,
    _minibatch_loss,
    passes,
    token_logprobs,
    token_scores,
)

torch = pytest.importorskip("torch")


def _model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    shape = LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        pad_token_id=0, bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    return LlamaForCausalLM(shape)


def _sequences() -> list[TrainSequence]:
    """Episodes of 20-60 tokens whose model turns (mask 1) alternate with environment ones."""
    rng = random.Random(3)
    out = []
    for index in range(6):
        length = rng.randrange(20, 60)
        mask = [1 if (t // 5) % 2 and t > 4 else 0 for t in range(length)]
        behaviour = [rng.uniform(-3, -0.1) if m else None for m in mask]
        advantages = [rng.choice([-1.0, 0.5]) if m else 0.0 for m in mask]
        ids = [rng.randrange(1, 97) for _ in range(length)]
        out.append(TrainSequence(ids, mask, behaviour, advantages, f"g{index % 2}", 0.0))
    return out


def _full_logprobs(model, batch) -> torch.Tensor:
    """Every position's logprob from the whole logits, as computed before."""
    width = max(len(s.ids) for s in batch)
    ids = torch.tensor([s.ids + [0] * (width - len(s.ids)) for s in batch])
    attention = torch.tensor([[1] * len(s.ids) + [0] * (width - len(s.ids)) for s in batch])
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
    picked = torch.log_softmax(logits, dim=-1).gather(2, ids[:, 1:].unsqueeze(2)).squeeze(2)
    return torch.cat([torch.zeros(len(batch), 1), picked], dim=1)


def test_logprobs_at_model_tokens_equal_the_whole_logits() -> None:
    model, batch = _model().eval(), _sequences()
    with torch.no_grad():
        kept, full = token_logprobs(model, batch, 0), _full_logprobs(model, batch)
    for row, seq in enumerate(batch):
        for t, learned in enumerate(seq.mask):
            if learned:
                assert abs(float(kept[row, t] - full[row, t])) < 1e-5
            else:
                assert float(kept[row, t]) == 0.0


def test_passes_add_up_to_the_minibatch_gradient() -> None:
    batch = _sequences()
    runs = list(passes(batch, tokens=100))
    assert len(runs) > 2
    assert sorted(id(s) for run in runs for s in run) == sorted(id(s) for s in batch)
    widths = [len(run[0].ids) for run in runs]
    assert widths == sorted(widths, reverse=True)  # longest rows first, each run led by its longest
    assert all(len(run) * max(len(s.ids) for s in run) <= 100 or len(run) == 1 for run in runs)
    whole, split = _model(), _model()
    _minibatch_loss(whole, None, batch, 0, 0.2, 0.0)["loss"].backward()
    for run in runs:
        (_minibatch_loss(split, None, run, 0, 0.2, 0.0)["loss"] * len(run) / len(batch)).backward()
    for a, b in zip(whole.parameters(), split.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-6)


def test_entropy_at_model_tokens_is_the_whole_distributions() -> None:
    model, batch = _model().eval(), _sequences()
    width = max(len(s.ids) for s in batch)
    ids = torch.tensor([s.ids + [0] * (width - len(s.ids)) for s in batch])
    attention = torch.tensor([[1] * len(s.ids) + [0] * (width - len(s.ids)) for s in batch])
    with torch.no_grad():
        _, entropy = token_scores(model, batch, 0)
        logp = torch.log_softmax(model(input_ids=ids, attention_mask=attention).logits, dim=-1)
    whole = -(logp.exp() * logp).sum(-1)
    for row, seq in enumerate(batch):
        for t, learned in enumerate(seq.mask):
            expected = float(whole[row, t - 1]) if learned else 0.0
            assert abs(float(entropy[row, t]) - expected) < 1e-4


def test_advantage_signal_counts_flat_groups_and_moved_tokens() -> None:
    episodes = [
        SimpleNamespace(group=group, reward=reward, judged=True)
        for group, reward in [("a", 1.0), ("a", 0.0), ("b", 0.0), ("b", 0.0), ("c", 1.0)]
    ]
    batch = _sequences()
    signal = advantage_signal(episodes, batch)  # type: ignore[arg-type]
    assert signal["groups"] == 3 and signal["zero_variance_groups"] == round(2 / 3, 4)
    assert signal["advantage_tokens"] == 1.0  # every model token of _sequences has one
    batch[0].advantages = [0.0] * len(batch[0].ids)
    model_tokens = sum(sum(s.mask) for s in batch)
    moved = model_tokens - sum(batch[0].mask)
    assert advantage_signal(episodes, batch)["advantage_tokens"] == round(moved / model_tokens, 4)  # type: ignore[arg-type]


def test_episode_weighting_gives_each_episode_one_share_of_the_loss() -> None:
    """A failure cut into three samples weighs as much as a success of one sample: the
    group's advantages, weighted, sum to zero (with sample weighting they do not)."""
    from trajforge.schema import Outcome, Task, Trajectory
    from trajforge.train.rl.advantages import training_sequences
    from trajforge.train.rl.config import RLConfig
    from trajforge.train.rl.rollouts import Episode

    sample = {"prompt_ids": [1], "completion_ids": [2, 3], "loss_mask": [1, 1],
              "logprobs": [-0.1, -0.2], "reward": 0.0, "call_ids": ["c"]}  # fmt: skip

    def episode(name: str, won: bool, samples: int) -> Episode:
        run = Trajectory(task=Task(id="t", environment="household"), outcome=Outcome(success=won))
        return Episode(name, "g", run, None, [dict(sample) for _ in range(samples)])

    episodes = [episode("s1", True, 1), episode("s2", False, 3)]
    for weighting, mass in (("sample", -2.0), ("episode", 0.0)):
        config = RLConfig(reward="outcome", weighting=weighting)  # type: ignore[arg-type]
        sequences = training_sequences(episodes, config)
        assert len(sequences) == 4
        assert abs(sum(s.weight for s in sequences) / 4 - 1.0) < 1e-9  # the loss keeps its size
        total = sum(s.weight * s.advantages[-1] for s in sequences)
        assert abs(total - mass) < 1e-3, (weighting, total)
    model = _model()
    batch = _sequences()[:2]
    plain = _minibatch_loss(model, None, batch, 0, 0.2, 0.0)["loss"]
    alone = _minibatch_loss(model, None, batch[:1], 0, 0.2, 0.0)["loss"]
    batch[0].weight, batch[1].weight = 2.0, 0.0  # the second sequence counts for nothing
    weighted = _minibatch_loss(model, None, batch, 0, 0.2, 0.0)["loss"]
    assert torch.allclose(weighted, alone) and not torch.allclose(weighted, plain)
