"""Checkpoint directories are replaced whole or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajforge.train import atomic
from trajforge.train.atomic import restore_previous, write_directory


def _files(path: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(path.iterdir())}


def _writer(version: str, fail: bool = False):
    def fill(staging: Path) -> None:
        (staging / "a.txt").write_text(version)
        if fail:
            raise OSError(28, "No space left on device")
        (staging / "b.txt").write_text(version)

    return fill


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "rename-aside"])
def test_a_new_directory_replaces_the_old_one_whole(tmp_path: Path, monkeypatch, exchange) -> None:
    if not exchange:
        monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    final = tmp_path / "ckpt"
    assert write_directory(final, _writer("1")) == final
    (final / "old-only.txt").write_text("1")
    write_directory(final, _writer("2"))
    assert _files(final) == {"a.txt": "2", "b.txt": "2"}
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_a_failed_write_leaves_the_old_directory_and_no_leftovers(tmp_path: Path) -> None:
    final = tmp_path / "ckpt"
    write_directory(final, _writer("1"))
    with pytest.raises(OSError, match="No space left"):
        write_directory(final, _writer("2", fail=True))
    assert _files(final) == {"a.txt": "1", "b.txt": "1"}
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]
    with pytest.raises(OSError):
        write_directory(tmp_path / "new", _writer("1", fail=True))
    assert not (tmp_path / "new").exists()


def test_what_a_killed_writer_left_is_put_right(tmp_path: Path) -> None:
    final = tmp_path / "ckpt"
    write_directory(final, _writer("1"))
    final.rename(tmp_path / ".ckpt.previous")  # killed between the two renames
    dead = tmp_path / ".ckpt.999999999-abcd.partial"  # a dead writer's staging directory
    dead.mkdir()
    restore_previous(final)
    assert _files(final) == {"a.txt": "1", "b.txt": "1"}
    write_directory(final, _writer("2"))
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]
