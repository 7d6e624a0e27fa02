"""Number formats shared by the reference kernels: fp8 e4m3fn, e2m1 (fp4), bit packing.

Every rounding here is spelled out step by step in fp32 so that the CUDA versions in
``kernels_ref/cuda`` can reproduce the codes bit for bit (docs/kernels.md):

* every fp8 rounding is an explicit ``clamp(±448)`` followed by a round-to-nearest-even cast.
  PyTorch 2.13 on CPU happens to saturate out-of-range casts; we never depend on that;
* e2m1 encoding uses the threshold table of :func:`e2m1_encode`, not a float cast;
* bit packing uses shifts and masks on integers, never ``Tensor.view`` across widths, so the
  result does not depend on the host's byte order.

All functions are device-agnostic: they only use tensor ops on the inputs' device.
"""

from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0

#: Lower bound on a dynamic per-token activation scale (vLLM ``QuantFP8``:
#: ``1 / (FP8_MAX * 512)``), rounded once to fp32 like the CUDA kernel's ``float`` constant.
FP8_MIN_SCALE = float(torch.tensor(1.0 / (FP8_MAX * 512.0), dtype=torch.float32).item())

#: Floor on a weight ``amax`` before dividing by 448, so that an all-zero row gets scale
#: ``1e-12/448`` and codes 0 instead of 0/0 (vLLM ``Fp8LinearMethod`` uses the same floor).
WEIGHT_AMAX_FLOOR = 1e-12

#: The 8 magnitudes of e2m1, indexed by the low 3 bits of a nibble (bit 3 is the sign).
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_MAX = 6.0

#: NVFP4 global-scale denominator: an amax maps to the top of both scale levels (448 · 6).
NVFP4_GLOBAL_DENOM = FP8_MAX * E2M1_MAX

HALF_DTYPES = (torch.float16, torch.bfloat16)


def f32(value: float | torch.Tensor, device: torch.device | str | None = None) -> torch.Tensor:
    """A 0-d fp32 tensor: python floats are rounded to fp32 once, here, before any math."""
    if isinstance(value, torch.Tensor):
        return value.to(device=device if device is not None else value.device, dtype=torch.float32)
    return torch.tensor(value, dtype=torch.float32, device=device)


def matmul_fp32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` of fp32 tensors (2-D or batched): the one GEMM path of every reference layer and
    every PyTorch fallback in :mod:`kernels_ref.ops`.

    Two things are pinned so that equal inputs give equal bits whichever layer asks:

    * both operands are made contiguous first. BLAS picks a different kernel (and a different
      summation order) for a transposed operand at some shapes, so ``x @ W.t()`` and
      ``x @ W.t().contiguous()`` can differ in the last bit; the exact crash-row check compares a
      quantized layer with an unquantized twin that stores the same weight the other way round;
    * TF32 (10-bit mantissa) is switched off for this call on CUDA: it would put the reference
      outside the fp16 tolerance of the bounds.
    """
    if a.dtype != torch.float32 or b.dtype != torch.float32:
        raise TypeError(f"matmul_fp32 expects fp32 operands, got {a.dtype} and {b.dtype}")
    a, b = a.contiguous(), b.contiguous()
    if a.device.type != "cuda" or not torch.backends.cuda.matmul.allow_tf32:
        return a @ b
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return a @ b
    finally:
        torch.backends.cuda.matmul.allow_tf32 = True


def div_exact(a: torch.Tensor, divisor: float) -> torch.Tensor:
    """``a / divisor`` rounded once, on every device.

    PyTorch on CUDA computes ``tensor / python_float`` (or a 0-d CPU tensor) as a multiply by the
    rounded reciprocal, while the CUDA kernels use ``__fdiv_rn``; on bf16 activation rows the two
    disagree in about 60% of the per-token scales. A divisor tensor of ``a``'s own shape and device
    makes PyTorch divide for real, so both sides compute the same expression (and the CPU, which
    always divides, agrees). ``tests/kernels/test_formats.py`` runs the quantizers under a mode that
    mimics CUDA's scalar division to show that none is left.
    """
    af = a.float()
    return af / torch.full_like(af, divisor)


def to_fp8(x: torch.Tensor) -> torch.Tensor:
    """``clamp(x, ±448)`` in fp32, then a round-to-nearest-even cast to e4m3fn.

    NaN stays NaN (clamp propagates it); callers never feed NaN on purpose.
    """
    return x.float().clamp(-FP8_MAX, FP8_MAX).to(FP8)


def fp8_bytes(codes: torch.Tensor) -> torch.Tensor:
    """The raw bit patterns of an fp8 tensor, as uint8 (same shape)."""
    if codes.dtype != FP8:
        raise TypeError(f"expected {FP8}, got {codes.dtype}")
    return codes.view(torch.uint8)


def fp8_from_bytes(raw: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`fp8_bytes`: uint8 bit patterns viewed as e4m3fn."""
    if raw.dtype != torch.uint8:
        raise TypeError(f"expected torch.uint8, got {raw.dtype}")
    return raw.view(FP8)


def weight_fp8_scale(amax: torch.Tensor) -> torch.Tensor:
    """fp32 weight scale ``max(amax, 1e-12) / 448`` (a true division, see :func:`div_exact`)."""
    return div_exact(amax.float().clamp(min=WEIGHT_AMAX_FLOOR), FP8_MAX)


def quantize_fp8_weight(w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Weight codes ``fp8(clamp(w / scale, ±448))``, the division done in fp32.

    Weights divide by the scale (as vLLM's ``marlin_quant_fp8_torch`` does); activations
    multiply by a reciprocal instead, see :func:`fp8_linear.fp8_quant_per_token`.
    ``scale`` must broadcast against ``w``.
    """
    return to_fp8(w.float() / scale.float())


def int32_from_uint32(v: torch.Tensor) -> torch.Tensor:
    """Reinterpret non-negative int64 values in ``[0, 2**32)`` as two's-complement int32."""
    v = v.to(torch.int64)
    return torch.where(v >= 2**31, v - 2**32, v).to(torch.int32)


def int16_from_uint16(v: torch.Tensor) -> torch.Tensor:
    """Reinterpret non-negative int32/int64 values in ``[0, 2**16)`` as int16."""
    v = v.to(torch.int32)
    return torch.where(v >= 2**15, v - 2**16, v).to(torch.int16)


def uint_fields(words: torch.Tensor, bits: int, count: int) -> torch.Tensor:
    """Split each int32 word into ``count`` unsigned ``bits``-wide fields, field 0 lowest.

    Returns int64 with a new last dimension of size ``count``.
    """
    w = words.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(count, device=words.device, dtype=torch.int64) * bits
    return (w.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)


def join_fields(fields: torch.Tensor, bits: int) -> torch.Tensor:
    """Inverse of :func:`uint_fields`: the last dimension's fields, field 0 lowest, to int32."""
    count = fields.shape[-1]
    shifts = torch.arange(count, device=fields.device, dtype=torch.int64) * bits
    word = ((fields.to(torch.int64) & ((1 << bits) - 1)) << shifts).sum(-1)
    return int32_from_uint32(word)


# ----------------------------------------------------------------------------- e2m1 (fp4)


def e2m1_encode(v: torch.Tensor) -> torch.Tensor:
    """Nibble codes (uint8, 0..15) for values already clamped to ±6.

    Magnitude thresholds are round-to-nearest-even on the e2m1 grid:
    ``≤.25→0, <.75→.5, ≤1.25→1, <1.75→1.5, ≤2.5→2, <3.5→3, ≤5→4, else 6``.
    Bit 3 (the sign) is set iff ``v < 0``, so ``-0.0`` encodes as ``0x0`` and ``-0.1`` as ``0x8``.
    """
    v = v.float()
    a = v.abs()
    idx = (
        (a > 0.25).to(torch.uint8)
        + (a >= 0.75).to(torch.uint8)
        + (a > 1.25).to(torch.uint8)
        + (a >= 1.75).to(torch.uint8)
        + (a > 2.5).to(torch.uint8)
        + (a >= 3.5).to(torch.uint8)
        + (a > 5.0).to(torch.uint8)
    )
    sign = (v < 0).to(torch.uint8) << 3
    return idx | sign


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """fp32 values of nibble codes (any integer dtype, values 0..15)."""
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)
    c = codes.to(torch.int64)
    mag = table[c & 0x7]
    return torch.where((c & 0x8) != 0, -mag, mag)


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """Pack nibble codes ``[..., K]`` into uint8 ``[..., K/2]``: even k low nibble, odd k high."""
    if codes.shape[-1] % 2:
        raise ValueError(f"last dimension must be even, got {codes.shape[-1]}")
    c = codes.to(torch.uint8) & 0xF
    return c[..., 0::2] | (c[..., 1::2] << 4)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_nibbles`: uint8 ``[..., K/2]`` to nibble codes uint8 ``[..., K]``."""
    if packed.dtype != torch.uint8:
        raise TypeError(f"expected torch.uint8, got {packed.dtype}")
    low = packed & 0xF
    high = packed >> 4
    return torch.stack((low, high), dim=-1).flatten(-2)
