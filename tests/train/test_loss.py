"""The training loss: the model's own loss, computed at fewer positions and once per opening."""

from __future__ import annotations

import pytest

from trajforge.train.loss import IGNORED, MIN_SHARED, learned_loss, shared_opening

torch = pytest.importorskip("torch")


def _model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    shape = LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        pad_token_id=0, bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    return LlamaForCausalLM(shape).train()


def _batch(opening: int):
    """Three right-padded rows that share `opening` tokens, learned after it."""
    generator = torch.Generator().manual_seed(1)
    common = torch.randint(1, 97, (opening,), generator=generator)
    rows = [
        torch.cat([common, torch.randint(1, 97, (n,), generator=generator)]) for n in (9, 14, 6)
    ]
    width = max(len(r) for r in rows)
    ids = torch.zeros(3, width, dtype=torch.long)
    attention = torch.zeros(3, width, dtype=torch.long)
    labels = torch.full((3, width), IGNORED)
    for index, row in enumerate(rows):
        ids[index, : len(row)], attention[index, : len(row)] = row, 1
        labels[index, opening + 2 : len(row)] = row[opening + 2 :]  # learned: the row's own tail
    return ids, attention, labels


def _loss_and_grads(model, loss):
    model.zero_grad()
    loss.backward()
    return float(loss.detach()), [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("opening", [MIN_SHARED + 8, 5])
def test_the_loss_and_its_gradients_are_the_models_own(opening: int) -> None:
    model = _model()
    ids, attention, labels = _batch(opening)
    expected, expected_grads = _loss_and_grads(
        model, model(input_ids=ids, attention_mask=attention, labels=labels).loss
    )
    got, grads = _loss_and_grads(model, learned_loss(model, ids, attention, labels))
    assert got == pytest.approx(expected, rel=1e-5)
    assert len(grads) == len(expected_grads)
    for grad, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, want, rtol=1e-4, atol=1e-6)


def test_the_opening_stops_at_the_first_difference_and_the_first_learned_position() -> None:
    ids, attention, labels = _batch(MIN_SHARED + 8)
    positions = (labels[:, 1:] != IGNORED).any(dim=0).nonzero().squeeze(1)
    assert shared_opening(ids, attention, positions) == MIN_SHARED + 8
    assert int(positions[0]) == MIN_SHARED + 9  # the first learned label is at MIN_SHARED + 10
    assert shared_opening(ids, attention, positions - 20) == MIN_SHARED - 11
    assert shared_opening(ids[:1], attention[:1], positions) == 0  # one row shares nothing
