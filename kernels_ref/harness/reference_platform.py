"""A stand-in for vLLM's ``current_platform``, reduced to what the MLA prefill asks of it.

The verification fixture (``kernels_ref/harness/verify_fixture/mla_prefill.py``), vLLM's own prefill functions run by
the upstream harness, and the ``vllm`` helper template all compare a weight dtype against
``current_platform.fp8_dtype()``. vLLM is not installed here, so they get this object instead.
Only CUDA-like platforms are modelled: ROCm's ``float8_e4m3fnuz`` would change the sentinel, and
the reference kernels are e4m3fn throughout.

(The module is not called ``platform``: that name would shadow the standard library's module for
anything run with this directory first on ``sys.path``.)
"""

from __future__ import annotations

import torch

from ..formats import FP8


class ReferencePlatform:
    """The attributes of ``vllm.platforms.current_platform`` the MLA prefill reads."""

    device_name = "reference"

    def fp8_dtype(self) -> torch.dtype:
        return FP8

    def is_cpu(self) -> bool:
        # 0.33.0 takes a CPU-only gather when this is true; the harness models the CUDA path.
        return False


current_platform = ReferencePlatform()
