"""Asking for bf16 on a CPU without bf16 units warns (it runs there, far slower than fp32);
on a CPU with them it is silent (the CPU's answer is oneDNN's own)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from trajforge.serve import precision
from trajforge.serve.student import Student
from trajforge.train.rows import sequences
from trajforge.train.sft import SFTConfig, train_sft

from .conftest import teacher_rows

TWO_STEPS = SFTConfig(steps=2, batch_size=2, hidden=16, layers=1, heads=1, save_every=2,
                      threads=1, bf16=True)  # fmt: skip


def _train_bf16(out: Path) -> Path:
    return train_sft(sequences(teacher_rows(range(2))), out, TWO_STEPS)


@pytest.mark.parametrize("has_units", [False, True])
def test_bf16_training_and_weights_warn_only_without_bf16_units(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, has_units: bool
) -> None:
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: has_units)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = _train_bf16(tmp_path / "ckpt")
        Student(out, bf16=True)
    slow = [str(w.message) for w in caught if "without bf16 units" in str(w.message)]
    if has_units:
        assert slow == []
    else:
        assert len(slow) == 2
        assert slow[0].startswith("bf16 autocast on a CPU without bf16 units")
        assert slow[1].startswith("bf16 weights on a CPU without bf16 units")
