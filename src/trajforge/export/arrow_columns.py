"""Arrow arrays made from Python column values through their buffers.

`pyarrow.array` on Python values imports pandas when it is installed (to ask whether the
values are a pandas array): about 50 MB more in the process and 0.4 s on the first call.
The Parquet export never needs pandas, so it builds its columns here: a validity bitmap
where values are missing, and the values' buffer (fixed-width numbers, bits, or offsets
and UTF-8 bytes).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

_NUMBERS = {pa.int64(): "q", pa.float64(): "d"}
_OFFSETS = {pa.string(): "i", pa.large_string(): "q"}


def column_array(values: Sequence[Any], kind: pa.DataType) -> pa.Array:
    """An array of `kind` (int64, float64, bool, string, large_string) holding `values`
    (None: missing; text as `str` or UTF-8 `bytes`; booleans as bool or 0/1)."""
    validity = _validity(values)
    if kind in _NUMBERS:
        numbers = array(_NUMBERS[kind], (0 if v is None else v for v in values))
        return pa.Array.from_buffers(kind, len(values), [validity, pa.py_buffer(numbers)])
    if kind == pa.bool_():
        return pa.Array.from_buffers(kind, len(values), [validity, _bits(values)])
    if kind in _OFFSETS:
        return _text_array(values, kind, validity)
    raise ValueError(f"no Arrow column of type {kind}")


def _text_array(
    values: Sequence[str | bytes | None], kind: pa.DataType, validity: pa.Buffer | None
) -> pa.Array:
    """A string array over the values' UTF-8 bytes, joined once."""
    encoded = [v.encode() if isinstance(v, str) else v or b"" for v in values]
    offsets = array(_OFFSETS[kind], [0])
    end = 0
    for value in encoded:
        end += len(value)
        offsets.append(end)
    buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    return pa.Array.from_buffers(kind, len(values), buffers)


def _validity(values: Sequence[Any]) -> pa.Buffer | None:
    """The validity bitmap (None when no value is missing)."""
    if all(v is not None for v in values):
        return None
    return _bits([v is not None for v in values])


def _bits(flags: Sequence[Any]) -> pa.Buffer:
    """Arrow's bit layout: value i is bit i % 8 of byte i // 8 (a missing flag is 0)."""
    packed = bytearray((len(flags) + 7) // 8)
    for index, flag in enumerate(flags):
        if flag:
            packed[index >> 3] |= 1 << (index & 7)
    return pa.py_buffer(bytes(packed))
