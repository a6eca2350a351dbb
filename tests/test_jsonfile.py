"""Cutting JSONL files into line ranges, and reading them back."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from trajforge.jsonfile import LineRange, iter_jsonl, line_ranges, lines_before


def _jsonl(path: Path, lengths: list[int]) -> Path:
    """A JSONL file whose line n is a JSON string of about `lengths[n]` bytes."""
    path.write_text(
        "".join(f'"{n:06d}{"x" * max(0, length - 9)}"\n' for n, length in enumerate(lengths))
    )
    return path


def _check_cover(path: Path, ranges: list[LineRange]) -> None:
    """The ranges cover the file in order, each from a line start; only the first has its
    first line's number (the others' are not counted, and read from 1); numbered by
    `lines_before`, reading them gives every line once."""
    data = path.read_bytes()
    assert ranges[0].start == 0 and ranges[-1].stop in (None, len(data))
    for before, after in itertools.pairwise(ranges):
        assert before.stop == after.start and data[after.start - 1 : after.start] == b"\n"
    assert [part.first_line for part in ranges] == [1] + [None] * (len(ranges) - 1)
    for part in ranges:
        assert lines_before(path, part.start) == data.count(b"\n", 0, part.start)
        relative = [number for number, _ in iter_jsonl(path, part)]
        assert relative == list(range(1, len(relative) + 1))
    numbered = [part._replace(first_line=lines_before(path, part.start) + 1) for part in ranges]
    lines = [number for part in numbered for number, _ in iter_jsonl(path, part)]
    last_unended = bool(data) and not data.endswith(b"\n")
    assert lines == list(range(1, data.count(b"\n") + last_unended + 1))


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
    starts = [lines_before(path, part.start) + 1 for part in ranges]
    assert starts == [1, 4, 6]  # each ends with a long line


def test_an_empty_file_is_one_range(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    assert line_ranges(path, 1000) == [LineRange(0, None, 1)]


def test_a_file_that_does_not_end_with_a_newline_keeps_its_last_line(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_bytes(b'"a"\n' * 10 + b'"' + b"x" * 500 + b'"')
    ranges = line_ranges(path, 20)
    _check_cover(path, ranges)
    assert ranges[-1] == LineRange(40, None, None)
