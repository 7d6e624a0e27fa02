"""A stand-in for vLLM's ``current_platform``, reduced to what the MLA prefill asks of it.

The verification fixture (``fixtures/verify/mla_prefill.py``) is written in vLLM's shape and
compares the kv_b_proj weight dtype against ``current_platform.fp8_dtype()``. vLLM is not
installed here, so the fixture imports this object instead. Only CUDA-like platforms are
modelled: ROCm's ``float8_e4m3fnuz`` would change the sentinel, and the spec fixes e4m3fn
(KERNELS_SPEC.md §1).
"""

from __future__ import annotations

import torch

from ..formats import FP8


class ReferencePlatform:
    """The attributes of ``vllm.platforms.current_platform`` the MLA prefill reads."""

    device_name = "reference"

    def fp8_dtype(self) -> torch.dtype:
        return FP8


current_platform = ReferencePlatform()
