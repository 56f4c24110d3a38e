"""Choosing a compute dtype for the machine: `"auto"` means bf16 only where the hardware has it.

bf16 halves memory traffic and is what GPUs and CPUs with AMX or AVX512-BF16 run fastest. A CPU
without bf16 instructions (AVX2 only, e.g. many AMD EPYC and older Intel parts) emulates it: on
such a machine a compiled vLLM forward pass of the embedded model in bf16 ran many times slower
than in float32 (one prefill step took minutes). So `"auto"` resolves per device and per machine:
CUDA (and any non-CPU accelerator) gets bf16, a CPU gets bf16 when oneDNN reports native bf16
support and float32 otherwise. Explicit dtypes pass through unchanged.
"""

from __future__ import annotations

import functools

__all__ = ["AUTO", "cpu_has_native_bf16", "resolve_dtype", "resolve_dtype_here"]

AUTO = "auto"


@functools.cache
def cpu_has_native_bf16() -> bool:
    """Whether this CPU runs bf16 matmuls natively (AVX512-BF16 or AMX), as oneDNN sees it."""
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def resolve_dtype(dtype: str, device: str = "cpu") -> str:
    """`dtype`, or for `"auto"` the fast one on `device`: "bfloat16" or "float32"."""
    if dtype != AUTO:
        return dtype
    if not str(device).startswith("cpu"):
        return "bfloat16"
    return "bfloat16" if cpu_has_native_bf16() else "float32"


def resolve_dtype_here(dtype: str) -> str:
    """`resolve_dtype` for where a backend runs by default: CUDA when there is one, else the CPU."""
    if dtype != AUTO:
        return dtype
    import torch

    return resolve_dtype(dtype, "cuda" if torch.cuda.is_available() else "cpu")
