"""`common_prefix_length`: the shared-prefix count the proxy's drift audit and stored forms use."""

from __future__ import annotations

import random

from trajforge.schema import common_prefix_length


def _by_loop(left: list, right: list) -> int:
    count = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        count += 1
    return count


def test_equals_an_item_by_item_count_on_random_lists() -> None:
    rng = random.Random(0)
    for _ in range(5000):
        left = [rng.randrange(3) for _ in range(rng.randrange(40))]
        right = left[: rng.randrange(len(left) + 1)] + [rng.randrange(3) for _ in range(5)]
        if rng.random() < 0.5:
            left, right = right, left
        assert common_prefix_length(left, right) == _by_loop(left, right), (left, right)


def test_long_token_lists_and_messages() -> None:
    ids = list(range(7000))
    assert common_prefix_length(ids, [*ids, 1, 2]) == 7000
    assert common_prefix_length(ids, ids[:6990] + [-1] * 20) == 6990
    assert common_prefix_length([], ids) == 0
    messages = [("user", "hi"), ("assistant", "hello")]
    assert common_prefix_length(messages, [("user", "hi"), ("assistant", "bye")]) == 1
