"""Every path into a JSON value, for tests that damage one field of a real file at random."""

from typing import Any


def json_paths(value: Any, limit: int, prefix: tuple = ()) -> list[tuple]:
    """Paths (tuples of keys and indices) into `value`, the root excluded; about `limit` at most."""
    found: list[tuple] = []
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else []
    )
    for key, item in items:
        found.append((*prefix, key))
        if len(found) < limit:
            found.extend(json_paths(item, limit, (*prefix, key)))
    return found
