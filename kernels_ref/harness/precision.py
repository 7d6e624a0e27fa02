"""Error bounds of the verify matrix, derived from each storage format's precision.

The context output of MLA prefill is ``o_h = Σ_j p_j v_j`` with ``v_j = W_UV c_j`` and scores
``s_j = (q · k_j) · scale``, ``k_j = [W_UK c_j, k_pe_j]``; the dense reference uses the stored cache
and the fp32 ``W``. Every error source is a relative perturbation of ``W``, of the latent ``c``
entering kv_b_proj, or of a tensor rounded on the way:

* a round-to-nearest with a p-bit significand (implicit bit included) has an rms relative error of
  ``0.425 · 2^-p`` on log-uniformly spread values (``2^(1-p)/√12 · E[1/x²]^½`` over ``[1, 2)``):
  bf16 0.17%, fp16 0.021%, e4m3 2.7%, e2m1 10.6%;
* integer grids have an rms error of ``step/√12``: int4 asymmetric over a group of 64 normal
  values spans their expected range ``≈ 4.82σ`` in 15 steps (9.3% of σ); int8 symmetric per row of
  256 spans ``±E[max|x|] ≈ ±2.93σ`` in 254 steps (0.67%);
* ``o`` and ``k`` are linear in ``W`` and in ``c``, and ``o`` is a convex mix of the ``v_j``, so a
  relative error ``e`` of ``W``, or an independent one per token of ``c``, gives a relative error
  ``≈ e`` in ``v`` and in ``k``. A score error ``δs_j ≈ e_k·|s_j|`` (``|s| ≈ 1`` at this
  initialisation) moves the softmax weights by the same relative amount, so ``k`` errors reach
  ``o`` about as strongly as ``v`` errors, and the LSE by ``Σ p_j δs_j``.

So with ``e_k`` the relative error of the keys (and of q in an fp8 prefill) and ``e_v`` of the
values, the predicted rms errors are ``rel ≈ √(e_k² + e_v² + u²)`` (``u``: the final rounding to the
model dtype) and ``lse ≈ √(e_k² + e_q²)``. The rel bound is :data:`REL_FACTOR` = 2 times its
prediction: room for the worst of a few hundred tokens and a few seeds around an rms value. The
LSE bound is the prediction itself (:data:`LSE_FACTOR` = 1): the LSE moves by a softmax-weighted
mean of the score errors, which stays below their rms (observed at 0.3-0.5 of it).
``tests/test_verify.py`` holds observed/predicted within [0.5, 1.5] for rel and [0.1, 1] for the
LSE on every row, so a model that drifted from the data would show there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

RNE_RMS = 0.425  # rms relative error of round-to-nearest, in units of 2^-p
REL_FACTOR = 2.0
LSE_FACTOR = 1.0

SIGNIFICAND_BITS = {torch.float32: 24, torch.float16: 11, torch.bfloat16: 8, torch.float8_e4m3fn: 4}
E2M1_BITS = 2
INT4_G64_RMS = 4.82 / 15 / math.sqrt(12)  # expected range of 64 N(0,1) draws, 15 steps
INT8_ROW256_RMS = 2 * 2.93 / 254 / math.sqrt(12)  # ±E[max|x|] of 256 N(0,1) draws, 254 steps


def rne(dtype_or_bits) -> float:
    bits = dtype_or_bits if isinstance(dtype_or_bits, int) else SIGNIFICAND_BITS[dtype_or_bits]
    return RNE_RMS * 2.0**-bits


def _rss(*parts: float) -> float:
    return math.sqrt(sum(p * p for p in parts))


@dataclass(frozen=True)
class Precision:
    """The error sources of one backend row, as rms relative errors."""

    weight: float  # storage format of W (incl. rounding of its scales)
    activation: float  # quantization of kv_b_proj's input inside the layer (W8A8, W4A4)
    model: float  # one rounding to the model dtype
    fp8_prefill: bool

    @property
    def keys(self) -> float:
        # W and c errors, kv_nope's rounding to the model dtype, and fp8 k/v in an fp8 prefill.
        return _rss(self.weight, self.activation, self.model, rne(torch.float8_e4m3fn) if self.fp8_prefill else 0.0)

    @property
    def queries(self) -> float:
        return rne(torch.float8_e4m3fn) if self.fp8_prefill else 0.0

    def predicted_rel(self) -> float:
        return _rss(self.keys, self.keys, self.model)

    def predicted_lse(self) -> float:
        return _rss(self.keys, self.queries)

    def rel_bound(self) -> float:
        return REL_FACTOR * self.predicted_rel()

    def lse_bound(self) -> float:
        return LSE_FACTOR * self.predicted_lse()


def unquantized(model: torch.dtype, fp8_prefill: bool = False) -> Precision:
    return Precision(rne(model), 0.0, rne(model), fp8_prefill)


def fp8_w8a8(model: torch.dtype, fp8_prefill: bool = False) -> Precision:
    # With an fp8 prefill the input arrives in fp8 from the cache: nothing more is lost there.
    return Precision(rne(torch.float8_e4m3fn), 0.0 if fp8_prefill else rne(torch.float8_e4m3fn), rne(model), fp8_prefill)


def marlin_w8a16(model: torch.dtype, fp8_prefill: bool = False) -> Precision:
    # e4m3 codes, the scale rounded to the model dtype, the dequantized value rounded once more.
    return Precision(_rss(rne(torch.float8_e4m3fn), rne(model), rne(model)), 0.0, rne(model), fp8_prefill)


def nvfp4_w4a4(model: torch.dtype, fp8_prefill: bool = False) -> Precision:
    # e2m1 values with an e4m3 block scale, on both operands.
    e = _rss(rne(E2M1_BITS), rne(torch.float8_e4m3fn))
    return Precision(e, e, rne(model), fp8_prefill)


def awq_w4a16(model: torch.dtype, fp8_prefill: bool = False) -> Precision:
    return Precision(_rss(INT4_G64_RMS, rne(model)), 0.0, rne(model), fp8_prefill)


def int8_w8a8(model: torch.dtype, fp8_prefill: bool = False) -> Precision:
    return Precision(INT8_ROW256_RMS, INT8_ROW256_RMS, rne(model), fp8_prefill)
