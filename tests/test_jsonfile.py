"""Cutting JSONL files into line ranges, and reading them back."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from trajforge.jsonfile import LineRange, iter_jsonl, line_ranges


def _jsonl(path: Path, lengths: list[int]) -> Path:
    """A JSONL file whose line n is a JSON string of about `lengths[n]` bytes."""
    path.write_text(
        "".join(f'"{n:06d}{"x" * max(0, length - 9)}"\n' for n, length in enumerate(lengths))
    )
    return path


def _check_cover(path: Path, ranges: list[LineRange]) -> None:
    """The ranges cover the file in order, each from a line start, with its first line's
    number; reading them gives every line once."""
    data = path.read_bytes()
    assert ranges[0].start == 0 and ranges[-1].stop in (None, len(data))
    for before, after in itertools.pairwise(ranges):
        assert before.stop == after.start and data[after.start - 1 : after.start] == b"\n"
    for part in ranges:
        assert part.first_line == data.count(b"\n", 0, part.start) + 1
    lines = [number for part in ranges for number, _ in iter_jsonl(path, part)]
    assert lines == list(range(1, data.count(b"\n") + 1))


@pytest.mark.parametrize("size", [100, 1000, 100_000])
def test_ranges_cover_the_file_each_at_least_the_size(tmp_path: Path, size: int) -> None:
    path = _jsonl(tmp_path / "runs.jsonl", [60 + (n * 37) % 90 for n in range(400)])
    ranges = line_ranges(path, size)
    _check_cover(path, ranges)
    for part in ranges[:-1]:  # at least the size, and less than a line past it
        assert part.stop is not None and size <= part.stop - part.start < size + 150


def test_a_line_longer_than_a_block_ends_its_range(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "long.jsonl", [50, 50, 5000, 50, 3000, 50, 50])
    ranges = line_ranges(path, 1000)
    _check_cover(path, ranges)
    assert [part.first_line for part in ranges] == [1, 4, 6]  # each ends with a long line


def test_an_empty_file_is_one_range(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    assert line_ranges(path, 1000) == [LineRange(0, None, 1)]
