"""Whether bfloat16 pays on this CPU.

bf16 autocast and bf16 weights are fast only where the CPU multiplies bf16 itself (AVX-512
BF16 or AMX, which PyTorch reaches through oneDNN). Elsewhere PyTorch falls back to a plain
loop: on an AVX2-only AMD EPYC, one 1024x576 by 576x1536 matmul, forward and backward, took
1.39 s in bf16 against 82 ms in fp32, 17 times slower. Asking for bf16 there still works
(its results differ from a bf16 CPU's only in rounding), with a warning that says so.
"""

from __future__ import annotations

import functools
import warnings


@functools.cache
def cpu_has_bf16() -> bool:
    """Whether this CPU's bf16 matmuls run on bf16 units (oneDNN's own check)."""
    import torch

    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return bool(check()) if check is not None else False


def warn_if_slow_bf16(what: str) -> None:
    """A warning when `what` (e.g. "bf16 autocast") is asked for on a CPU without bf16 units."""
    if not cpu_has_bf16():
        warnings.warn(
            f"{what} on a CPU without bf16 units: PyTorch multiplies bf16 in a plain loop "
            "here, about 17 times slower than fp32; leave out --bf16 on this machine",
            RuntimeWarning,
            stacklevel=3,
        )
