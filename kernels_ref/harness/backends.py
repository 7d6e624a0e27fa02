"""The kv_b_proj backend matrix and what each variant must do on it (KERNELS_SPEC.md §4, §5).

Every backend's layer is built from the same fp32 ``W[H*(nope+v), L]``, so the only thing a
row changes is the storage format (and with it ``weight.dtype``, the value the pre-fix cast
reads). The table records, per backend, the expected outcome of ``pre`` (0.27.1's main path),
``pre_cp`` (its context-parallel path), the dtype the shared helper must choose for ``post``,
and the §5 error bounds of ``post`` against the dense fp32 reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..formats import FP8
from ..fp8_linear import Fp8Linear
from ..linear_basic import AwqLikeLinear, UnquantizedLinear
from ..marlin_fp8 import DEEPSEEK_GROUP_SIZE, MarlinFp8Linear
from ..nvfp4 import NvFp4Linear


@dataclass(frozen=True)
class Crash:
    """An expected exception: its type name, its exact ``str()`` and a function on its traceback."""

    error_type: str
    message: str
    raised_in: str  # a frame of this name must be on the traceback

    def describe(self) -> str:
        return f"{self.error_type}: {self.message}"


# ``marlin_gemm``'s dtype check (csrc/quantization/marlin/marlin.cu); §0.1: backticks included.
MARLIN_INT32_INPUT = Crash("RuntimeError", "unsupported `a` scalar_type", "marlin_gemm")
# nn.Module.__getattr__ on a layer that registers qweight/qzeros/scales but no weight.
# The cast itself raises, in the main path: the cp path casts to the guarded alias instead.
AWQ_NO_WEIGHT = Crash(
    "AttributeError", f"'{AwqLikeLinear.__name__}' object has no attribute 'weight'", "_compute_prefill_context"
)


@dataclass(frozen=True)
class Backend:
    id: str
    model_dtype: torch.dtype
    layer_kind: str
    fp8_prefill: bool
    build: Callable[[torch.Tensor, torch.dtype, float], nn.Module]  # (W fp32, model dtype, input amax)
    pre: Crash | None  # None: runs
    pre_cp: Crash | None
    post_cast: torch.dtype | None  # what the helper returns; None keeps the model dtype
    rel_bound: float
    lse_bound: float
    extra: bool = False  # beyond §4's seven rows

    @property
    def cache_dtype(self) -> torch.dtype:
        # fp8 prefill reads an fp8 cache into an fp8 workspace (cp_gather_cache, k_scale 1).
        return FP8 if self.fp8_prefill else self.model_dtype

    @property
    def q_data_type(self) -> torch.dtype:
        return FP8 if self.fp8_prefill else self.model_dtype


def _unquantized(w, dtype, _amax):
    return UnquantizedLinear(w, params_dtype=dtype)


def _fp8(w, dtype, _amax):
    return Fp8Linear(w, params_dtype=dtype, per_channel=True)


def _marlin(w, dtype, _amax):
    return MarlinFp8Linear(w, params_dtype=dtype)


def _marlin_g128(w, dtype, _amax):
    return MarlinFp8Linear(w, params_dtype=dtype, group_size=DEEPSEEK_GROUP_SIZE)


def _nvfp4(w, dtype, amax):
    return NvFp4Linear(w, params_dtype=dtype, input_amax=amax)


def _awq(w, dtype, _amax):
    return AwqLikeLinear(w, params_dtype=dtype)


BF16, FP16 = torch.bfloat16, torch.float16

BACKENDS: dict[str, Backend] = {
    b.id: b
    for b in (
        Backend("bf16", BF16, "Unquantized", False, _unquantized, None, None, BF16, 1.2e-2, 3e-3),
        Backend("fp16", FP16, "Unquantized", False, _unquantized, None, None, FP16, 1.5e-3, 5e-4),
        Backend("fp8", BF16, "Fp8Linear", False, _fp8, None, None, None, 0.10, 4e-2),
        Backend("fp8_p", BF16, "Fp8Linear", True, _fp8, None, None, FP8, 0.13, 6e-2),
        Backend(
            "marlin", BF16, "MarlinFp8 (int32)", False, _marlin,
            MARLIN_INT32_INPUT, MARLIN_INT32_INPUT, BF16, 8e-2, 3e-2,
        ),
        Backend("nvfp4", BF16, "NvFp4 (uint8)", False, _nvfp4, None, None, None, 0.35, 0.12),
        Backend("awq", BF16, "AwqLike (no weight)", False, _awq, AWQ_NO_WEIGHT, None, BF16, 0.25, 0.10),
        Backend(
            "marlin_g128", BF16, "MarlinFp8 g128 (int32)", False, _marlin_g128,
            MARLIN_INT32_INPUT, MARLIN_INT32_INPUT, BF16, 8e-2, 3e-2, extra=True,
        ),
        Backend(
            "marlin_fp16", FP16, "MarlinFp8 (int32)", False, _marlin,
            MARLIN_INT32_INPUT, MARLIN_INT32_INPUT, FP16, 8e-2, 3e-2, extra=True,
        ),
    )
}


def expected_crash_sets() -> dict[str, set[str]]:
    """§4 assertion 1 as sets, e.g. ``{"pre": {"marlin", "awq", ...}, "pre_cp": {"marlin", ...}}``."""
    return {
        "pre": {b.id for b in BACKENDS.values() if b.pre is not None},
        "pre_cp": {b.id for b in BACKENDS.values() if b.pre_cp is not None},
    }
