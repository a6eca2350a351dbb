"""The supervised loss: next-token cross-entropy at the positions a batch learns from.

Two savings, neither of which changes the figure (the model's own `labels=` loss, a mean
over the learned tokens):

- The output layer and the softmax over the vocabulary (49,152 tokens for SmolLM2) run only
  at the positions some row learns from (`logits_to_keep`), not at every position.
- The opening every row of the batch shares (an agent's system prompt and tool list: 496 of
  the ~880 tokens of a household row rendered in SmolLM2's template) goes through the model
  once, and its key/value states are repeated for every row; the rows' own tokens attend
  to them as they would to their own copy, and gradients flow back through the repeat.
"""

from __future__ import annotations

from typing import Any

MIN_SHARED = 32
"""Opening tokens the rows must share before it is computed once."""
IGNORED = -100


def learned_loss(model: Any, ids: Any, attention: Any, labels: Any) -> Any:
    """Mean next-token cross-entropy over the learned labels (`IGNORED` elsewhere) of
    right-padded `ids` (module docstring)."""
    import torch

    targets = labels[:, 1:]
    positions = (targets != IGNORED).any(dim=0).nonzero().squeeze(1)
    shared = shared_opening(ids, attention, positions)
    if shared < MIN_SHARED:
        logits = model(input_ids=ids, attention_mask=attention, logits_to_keep=positions).logits
    else:
        logits = _after_opening(model, ids, attention, shared, positions - shared)
    picked = targets[:, positions]
    return torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), picked.reshape(-1), ignore_index=IGNORED
    )


def shared_opening(ids: Any, attention: Any, positions: Any) -> int:
    """How many opening tokens every row holds alike, up to the first learned position
    (whose logits the opening's pass would have to produce)."""
    if ids.shape[0] < 2 or len(positions) == 0:
        return 0
    alike = ((ids == ids[:1]) & (attention == 1)).all(dim=0)
    differing = (~alike).nonzero()
    common = int(differing[0, 0]) if len(differing) else ids.shape[1] - 1
    return min(common, int(positions[0]))


def _after_opening(model: Any, ids: Any, attention: Any, shared: int, keep: Any) -> Any:
    """Logits at `keep` (counted from `shared` on) with the opening fed once."""
    from trajforge.serve.kv_cache import cache_argument

    argument = cache_argument(model)
    opening = model(input_ids=ids[:1, :shared], use_cache=True, logits_to_keep=1)
    cache = getattr(opening, argument)
    cache.batch_repeat_interleave(ids.shape[0])
    rest = model(
        input_ids=ids[:, shared:],
        attention_mask=attention,
        use_cache=True,
        logits_to_keep=keep,
        **{argument: cache},
    )
    return rest.logits
