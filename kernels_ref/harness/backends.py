"""The kv_b_proj backend matrix, and what each variant of the prefill must do on each row.

Every row's layer is built from the same fp32 ``W[H*(nope+v), L]``, so a row changes only the
storage format (and with it ``weight.dtype``, the value the pre-fix cast reads), the prefill's
query dtype (fp8 prefill) and the KV-cache dtype.

Expected outcomes are derived, never tabulated: a variant decides a cast dtype (or fails
deciding it), the latent enters kv_b_proj in that dtype (or in the workspace's dtype when the
cast is None), and the layer's ``input_rejection`` says what it does with that dtype. The rules:

* ``pre`` / ``pre_cp``: vLLM 0.27.1's two cast blocks, transcribed in :func:`cast_0271`
  (the spec's crash sets, ``pre = {marlin, awq}`` and ``pre_cp = {marlin}`` on the original seven
  rows, are asserted in ``tests/test_verify.py``, and the upstream harness runs 0.27.1's own code
  against the same derivation);
* ``post`` (ours): the helper the fixer actually generated, called on the layer;
* ``0.28.0``: vLLM 0.28.0's ``_get_kv_b_proj_input_dtype``, extracted from its source and called.

A fixed variant (``post``, ``ours``) predicted to fail is a violation, unless its row declares
``known_failure`` with the reason: then it is a *known failure*, reported, checked to fail exactly
as predicted, and not counted. No row declares one today: fp8 prefill into NVFP4 was one until
the helper template returned ``params_dtype`` for (uint8 storage, fp8 input) instead of keeping
the fp8 latent, which ``scaled_fp4_quant`` rejects (it asserts a 16-bit input); vLLM 0.28.0's own
helper still fails there, as the upstream matrix shows. A helper that breaks any row is caught
however it breaks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..formats import FP8
from ..fp8_linear import Fp8BlockLinear, Fp8Linear
from ..int8_linear import Int8Linear
from ..linear_basic import AWQ_GROUP_SIZE, AwqLikeLinear, UnquantizedLinear, awq_quantize
from ..marlin_fp8 import DEEPSEEK_GROUP_SIZE, MarlinFp8Linear, marlin_quantize_fp8
from ..nvfp4 import NvFp4Linear
from . import precision as P
from .twins import Fp8W8A8Twin, NvFp4Twin


@dataclass(frozen=True)
class Crash:
    """An exception: its type name, its exact ``str()`` and a function on its traceback."""

    error_type: str
    message: str
    raised_in: str

    def describe(self) -> str:
        return f"{self.error_type}: {self.message}"


@dataclass(frozen=True)
class Expectation:
    """What one variant must do on one row and path."""

    cast: torch.dtype | None  # the dtype the variant casts the latent to (None: no cast)
    fed: torch.dtype | None  # the dtype entering kv_b_proj (None when deciding the cast failed)
    crash: Crash | None  # None: runs

    def describe(self) -> str:
        return "ok" if self.crash is None else self.crash.describe()


@dataclass(frozen=True)
class Backend:
    id: str
    model_dtype: torch.dtype
    layer_kind: str
    fp8_prefill: bool
    build: Callable[[torch.Tensor, torch.dtype, float], nn.Module]  # (W fp32, model dtype, input amax)
    precision: P.Precision
    kv_cache: str = "auto"  # vLLM's --kv-cache-dtype: "auto" (model dtype) or "fp8"
    twin: Callable[[torch.Tensor, torch.dtype, float], nn.Module] | None = None  # exact check: (W, dtype, input amax)
    known_failure: str = ""  # why a fixed variant may fail on this row (empty: it may not)
    # The fp8 KV cache's k_scale: "unit" (1.0) or "calibrated" (amax/448 of the stored rows, as a
    # checkpoint's is). It is read where the gather dequantizes the fp8 cache into a 16-bit
    # workspace: a 16-bit prefill (both paths) and the context-parallel path of vLLM. An fp8
    # prefill copies the fp8 rows as they are on the main path, k_scale unread (vLLM 0.27.1 and
    # 0.28.0 alike), so those rows keep k_scale 1: another scale there would measure that, not
    # the cast.
    k_scale: str = "unit"

    def __post_init__(self) -> None:
        if self.fp8_prefill and self.kv_cache != "fp8":
            raise ValueError(f"{self.id}: an fp8 prefill needs an fp8 KV cache (determine_prefill_query_data_type)")
        if self.k_scale not in ("unit", "calibrated") or (self.k_scale == "calibrated" and (self.kv_cache != "fp8" or self.fp8_prefill)):
            raise ValueError(f"{self.id}: k_scale {self.k_scale!r} needs an fp8 KV cache and a 16-bit prefill")

    def shape_problem(self, scenario) -> str | None:
        """Why this row's storage format cannot hold the scenario's kv_b_proj ``[N, K]``, or None.
        Marlin pads any shape (``marlin_padded_nk``); the others need their block sizes."""
        n, k = scenario.out_features, scenario.kv_lora_rank
        need = {"Fp8Block128": [(k, 128, "K")], "AwqLike": [(k, AWQ_GROUP_SIZE, "K"), (n, 8, "N")],
                "NvFp4": [(k, 16, "K")]}.get(self.layer_kind.split(" ")[0], [])
        if "g128" in self.layer_kind:
            need.append((k, DEEPSEEK_GROUP_SIZE, "K"))
        bad = [f"{name} = {size} is not a multiple of {block}" for size, block, name in need if size % block]
        return "; ".join(bad) or None

    @property
    def cache_dtype(self) -> torch.dtype:
        return FP8 if self.kv_cache == "fp8" else self.model_dtype

    @property
    def q_data_type(self) -> torch.dtype:
        return FP8 if self.fp8_prefill else self.model_dtype

    @property
    def rel_bound(self) -> float:
        return self.precision.rel_bound()

    @property
    def lse_bound(self) -> float:
        return self.precision.lse_bound()


# ----------------------------------------------------------------------------- cast rules


def cast_0271(layer: nn.Module, fp8_prefill: bool, path: str) -> torch.dtype | None:  # dtype-lint: ignore[DTL005] transcribes vLLM 0.27.1's unfixed cast rule on purpose
    """vLLM 0.27.1's cast blocks: ``main`` (``_compute_prefill_context``) casts to
    ``layer.weight.dtype`` (raising AttributeError without one), ``cp``
    (``_context_parallel_compute_prefill_context``) to the guarded alias."""
    alias = layer.weight.dtype if hasattr(layer, "weight") else layer.params_dtype
    if (fp8_prefill or alias != FP8) and alias != torch.uint8:
        return layer.weight.dtype if path == "main" else alias
    return None


def expect(
    decide: Callable[[], torch.dtype | None], layer: nn.Module, workspace_dtype: torch.dtype, deciding_frame: str
) -> Expectation:
    """The outcome of casting the latent as ``decide`` says and feeding it to ``layer``."""
    try:
        cast = decide()
    except AttributeError as exc:
        return Expectation(None, None, Crash("AttributeError", str(exc), deciding_frame))
    fed = workspace_dtype if cast is None else cast
    rejection = layer.input_rejection(fed)
    crash = None if rejection is None else Crash(type(rejection.error).__name__, str(rejection.error), rejection.raised_in)
    return Expectation(cast, fed, crash)


# ----------------------------------------------------------------------------- layers and twins


def _unquantized(w, dtype, _amax):
    return UnquantizedLinear(w, params_dtype=dtype)


def _fp8(w, dtype, _amax):
    return Fp8Linear(w, params_dtype=dtype, per_channel=True)


def _fp8_block(w, dtype, _amax):
    return Fp8BlockLinear(w, params_dtype=dtype)


def _marlin(group_size):
    def build(w, dtype, _amax):
        return MarlinFp8Linear(w, params_dtype=dtype, group_size=group_size)

    return build


def _nvfp4(w, dtype, amax):
    return NvFp4Linear(w, params_dtype=dtype, input_amax=amax)


def _awq(w, dtype, _amax):
    return AwqLikeLinear(w, params_dtype=dtype)


def _int8(w, dtype, _amax):
    return Int8Linear(w, params_dtype=dtype)


def marlin_twin(group_size):
    """An unquantized layer holding Marlin's dequantized weight, built from the quantizer's codes
    and scales (never through the pack/repack/permute path under test): ``deq = round(code ·
    round(s))``, the value Marlin's bit placement and fused scale reconstruct exactly."""

    def build(w, dtype, _amax=0.0):
        codes, scales = marlin_quantize_fp8(w, group_size)  # [K,N], [G,N]
        per_k = scales.to(dtype).float().repeat_interleave(w.shape[1] // scales.shape[0], dim=0)
        deq = (codes.float() * per_k).to(dtype)
        return UnquantizedLinear(deq.t(), params_dtype=dtype)

    return build


def awq_twin(w, dtype, _amax=0.0):
    """An unquantized layer holding AWQ's ``round((q - z) · s)``, from the quantizer's integers."""
    group = AWQ_GROUP_SIZE
    q, z, scales = awq_quantize(w, dtype, group)
    deq = ((q - z.repeat_interleave(group, dim=0)).float() * scales.float().repeat_interleave(group, dim=0)).to(dtype)
    return UnquantizedLinear(deq.t(), params_dtype=dtype)


# ----------------------------------------------------------------------------- the matrix

BF16, FP16 = torch.bfloat16, torch.float16

BACKENDS: dict[str, Backend] = {
    b.id: b
    for b in (
        # The seven rows of the original matrix.
        Backend("bf16", BF16, "Unquantized", False, _unquantized, P.unquantized(BF16)),
        Backend("fp16", FP16, "Unquantized", False, _unquantized, P.unquantized(FP16)),
        Backend("fp8", BF16, "Fp8Linear", False, _fp8, P.fp8_w8a8(BF16), twin=Fp8W8A8Twin),
        Backend("fp8_p", BF16, "Fp8Linear", True, _fp8, P.fp8_w8a8(BF16, True), kv_cache="fp8", twin=Fp8W8A8Twin),
        Backend("marlin", BF16, "MarlinFp8 (int32)", False, _marlin(None), P.marlin_w8a16(BF16), twin=marlin_twin(None)),
        Backend("nvfp4", BF16, "NvFp4 (uint8)", False, _nvfp4, P.nvfp4_w4a4(BF16), twin=NvFp4Twin),
        Backend("awq", BF16, "AwqLike (no weight)", False, _awq, P.awq_w4a16(BF16), twin=awq_twin),
        # Marlin variants.
        Backend("marlin_g128", BF16, "MarlinFp8 g128 (int32)", False, _marlin(DEEPSEEK_GROUP_SIZE),
                P.marlin_w8a16(BF16), twin=marlin_twin(DEEPSEEK_GROUP_SIZE)),
        Backend("marlin_fp16", FP16, "MarlinFp8 (int32)", False, _marlin(None), P.marlin_w8a16(FP16), twin=marlin_twin(None)),
        # DeepSeek's own checkpoint format: 128x128 block-scaled FP8 weights.
        Backend("fp8_b128", BF16, "Fp8Block128", False, _fp8_block, P.fp8_w8a8(BF16)),
        Backend("fp8_b128_p", BF16, "Fp8Block128", True, _fp8_block, P.fp8_w8a8(BF16, True), kv_cache="fp8"),
        # fp8 prefill with the other storage formats.
        Backend("bf16_p", BF16, "Unquantized", True, _unquantized, P.unquantized(BF16, True), kv_cache="fp8"),
        Backend("marlin_p", BF16, "MarlinFp8 (int32)", True, _marlin(None), P.marlin_w8a16(BF16, True),
                kv_cache="fp8", twin=marlin_twin(None)),
        Backend("nvfp4_p", BF16, "NvFp4 (uint8)", True, _nvfp4, P.nvfp4_w4a4(BF16, True), kv_cache="fp8", twin=NvFp4Twin),
        Backend("awq_p", BF16, "AwqLike (no weight)", True, _awq, P.awq_w4a16(BF16, True), kv_cache="fp8", twin=awq_twin),
        # An fp8 KV cache with a 16-bit prefill: the gather dequantizes into a bf16 workspace.
        Backend("bf16_kv8", BF16, "Unquantized", False, _unquantized, P.unquantized(BF16), kv_cache="fp8"),
        # Other integer storage: W8A8-INT8. Our helper casts to params_dtype, 0.28.0 feeds int8.
        Backend("int8", BF16, "Int8 W8A8 (int8)", False, _int8, P.int8_w8a8(BF16)),
        # An fp8 KV cache with a calibrated k_scale: the gather must multiply it back.
        Backend("bf16_kv8_s", BF16, "Unquantized", False, _unquantized, P.unquantized(BF16), kv_cache="fp8",
                k_scale="calibrated"),
        Backend("marlin_kv8_s", BF16, "MarlinFp8 (int32)", False, _marlin(None), P.marlin_w8a16(BF16), kv_cache="fp8",
                k_scale="calibrated", twin=marlin_twin(None)),
        # fp16 models beside bf16 ones: a helper that hard-codes bf16 fails here.
        Backend("fp16_kv8_s", FP16, "Unquantized", False, _unquantized, P.unquantized(FP16), kv_cache="fp8",
                k_scale="calibrated"),
        Backend("awq_fp16", FP16, "AwqLike (no weight)", False, _awq, P.awq_w4a16(FP16), twin=awq_twin),
        Backend("fp8_fp16_p", FP16, "Fp8Linear", True, _fp8, P.fp8_w8a8(FP16, True), kv_cache="fp8", twin=Fp8W8A8Twin),
        Backend("nvfp4_fp16", FP16, "NvFp4 (uint8)", False, _nvfp4, P.nvfp4_w4a4(FP16), twin=NvFp4Twin),
        Backend("nvfp4_fp16_p", FP16, "NvFp4 (uint8)", True, _nvfp4, P.nvfp4_w4a4(FP16, True), kv_cache="fp8",
                twin=NvFp4Twin),
        Backend("int8_fp16", FP16, "Int8 W8A8 (int8)", False, _int8, P.int8_w8a8(FP16)),
    )
}

#: The rows of the original matrix, whose crash sets the spec states.
SPEC_ROWS = ("bf16", "fp16", "fp8", "fp8_p", "marlin", "nvfp4", "awq")
