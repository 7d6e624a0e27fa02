"""NVFP4 W4A4 linear reference.

Mirrors vLLM's ``ModelOptNvFp4LinearMethod`` (``quantization/modelopt.py``), the emulation
utilities in ``nvfp4_emulation_utils.py`` (``ref_nvfp4_quant``, ``cast_to_fp4``,
``break_fp4_bytes``, ``run_nvfp4_emulations``), ``EmulationNvFp4LinearKernel`` and
``ops.scaled_fp4_quant``/``cutlass_scaled_fp4_mm``.

Its ``weight`` is packed uint8, so the dtype helper of vLLM PR #38771 returns ``None``: the
layer quantizes its own 16-bit input.

Conventions: ``*_global_scale`` is ``amax / 2688`` (2688 = 448·6); the quantizer takes its
reciprocal ``gs_inv`` (vLLM's ``input_global_scale``). ``alpha = input_global_scale ·
weight_global_scale``. Block scales are one fp8 per 16 elements along K in a linear
``[rows, K/16]`` layout (the emulation path's ``swizzle=False``; CUTLASS's 128×4 swizzle is left
out).
"""

from __future__ import annotations

import torch
from torch import nn

from .contracts import InputRejection
from .formats import (
    E2M1_MAX,
    HALF_DTYPES,
    NVFP4_GLOBAL_DENOM,
    div_exact,
    e2m1_decode,
    e2m1_encode,
    f32,
    matmul_fp32,
    pack_nibbles,
    to_fp8,
    unpack_nibbles,
)

NVFP4_BLOCK = 16


def nvfp4_quantize(x: torch.Tensor, gs_inv: float | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x[..., K]`` (any float dtype) to packed e2m1 and fp8 block scales.

    Per 16-element block, every step in fp32 (the CUDA kernel's order)::

        vmax = max |x|
        sf   = fp8(clamp(gs_inv · (vmax · fp32(1/6)), ±448))
        osc  = 0 if sf == 0 else 1 / (sf · (1 / gs_inv))
        v    = clamp(x · osc, ±6)       -> e2m1 code (thresholds in formats.e2m1_encode)

    ``gs_inv`` is rounded to fp32 first. Returns ``(packed uint8 [..., K/2], sf fp8 [..., K/16])``.
    """
    k = x.shape[-1]
    if k % NVFP4_BLOCK:
        raise ValueError(f"K = {k} is not divisible by {NVFP4_BLOCK}")
    xf = x.float().reshape(*x.shape[:-1], k // NVFP4_BLOCK, NVFP4_BLOCK)
    gs = f32(gs_inv, xf.device)
    vmax = xf.abs().amax(dim=-1, keepdim=True)
    sf = to_fp8(gs * (vmax * f32(1.0 / E2M1_MAX, xf.device)))
    sf32 = sf.float()
    inv_gs = torch.reciprocal(gs)
    osc = torch.where(sf32 == 0, torch.zeros_like(sf32), torch.reciprocal(sf32 * inv_gs))
    v = (xf * osc).clamp(-E2M1_MAX, E2M1_MAX)
    codes = e2m1_encode(v).reshape(*x.shape[:-1], k)
    return pack_nibbles(codes), sf.squeeze(-1)


def nvfp4_dequantize(packed: torch.Tensor, block_scales: torch.Tensor) -> torch.Tensor:
    """fp32 ``e2m1 · sf`` (global scale not applied): ``[..., K/2]`` uint8 and ``[..., K/16]`` fp8
    to ``[..., K]``."""
    vals = e2m1_decode(unpack_nibbles(packed))
    k = vals.shape[-1]
    blocks = vals.reshape(*vals.shape[:-1], k // NVFP4_BLOCK, NVFP4_BLOCK)
    return (blocks * block_scales.float().unsqueeze(-1)).reshape(*vals.shape[:-1], k)


def scaled_fp4_quant_input_error(dtype: torch.dtype) -> AssertionError | None:
    """``scaled_fp4_quant``'s assert on the input dtype (``_custom_ops.py``), or None."""
    if dtype in HALF_DTYPES:
        return None
    return AssertionError(f"input.dtype needs to be fp16 or bf16 but got {dtype}.")


def scaled_fp4_quant(x: torch.Tensor, global_scale_inv: float | torch.Tensor):
    """``ops.scaled_fp4_quant`` on a 16-bit input (linear block-scale layout).

    Raises ``AssertionError("input.dtype needs to be fp16 or bf16 but got <dtype>.")`` for any
    other dtype, as vLLM's assert does.
    """
    error = scaled_fp4_quant_input_error(x.dtype)
    if error is not None:
        raise error
    return nvfp4_quantize(x, global_scale_inv)


def nvfp4_mm(aq, a_sf, wq, w_sf, alpha, out_dtype: torch.dtype) -> torch.Tensor:
    """``cutlass_scaled_fp4_mm`` on linear block scales: ``(xd @ wd.T) · alpha`` in fp32, to
    ``out_dtype`` (``xd``, ``wd`` the dequantized ``e2m1 · sf`` operands, exact in fp32)."""
    if aq.dim() != 2 or wq.dim() != 2 or aq.shape[1] != wq.shape[1]:
        raise RuntimeError(f"nvfp4_mm shape mismatch: a {tuple(aq.shape)} and w {tuple(wq.shape)}")
    xd = nvfp4_dequantize(aq, a_sf)
    wd = nvfp4_dequantize(wq, w_sf)
    return (matmul_fp32(xd, wd.t()) * f32(alpha, xd.device)).to(out_dtype)


def nvfp4_global_scale(amax: float | torch.Tensor) -> torch.Tensor:
    """fp32 ``amax / 2688`` (a true division, see :func:`formats.div_exact`)."""
    return div_exact(f32(amax), NVFP4_GLOBAL_DENOM)


class NvFp4Linear(nn.Module):
    """NVFP4 W4A4 linear built from an fp32 ``W[N,K]`` and a calibrated input ``amax``.

    ``weight`` uint8 ``[N,K/2]``, ``weight_scale`` fp8 ``[N,K/16]``, ``weight_global_scale`` =
    ``amax|W|/2688``, ``input_global_scale`` = ``input_amax/2688``, ``alpha`` = their fp32 product.
    ``forward(x)``: ``x`` must be fp16/bf16 (assert, as in ``scaled_fp4_quant``);
    ``y = alpha · Σ_k (e2m1·sf)_x (e2m1·sf)_w`` in fp32, returned in ``x.dtype``.
    """

    def __init__(
        self,
        weight: torch.Tensor,
        params_dtype: torch.dtype = torch.bfloat16,
        input_amax: float | torch.Tensor = 4.0,
    ) -> None:
        super().__init__()
        size_n, size_k = weight.shape
        device = weight.device
        w_gs = nvfp4_global_scale(weight.float().abs().amax()).to(device)
        in_gs = nvfp4_global_scale(input_amax).to(device)
        packed, sf = nvfp4_quantize(weight, torch.reciprocal(w_gs))
        self.weight = nn.Parameter(packed, requires_grad=False)
        self.weight_scale = nn.Parameter(sf, requires_grad=False)
        self.weight_global_scale = nn.Parameter(w_gs, requires_grad=False)
        self.input_global_scale = nn.Parameter(in_gs, requires_grad=False)
        self.input_global_scale_inv = nn.Parameter(torch.reciprocal(in_gs), requires_grad=False)
        self.alpha = nn.Parameter(in_gs * w_gs, requires_grad=False)
        self.params_dtype = params_dtype
        self.input_size_per_partition = size_k
        self.output_size_per_partition = size_n

    def input_rejection(self, dtype: torch.dtype) -> InputRejection | None:
        error = scaled_fp4_quant_input_error(dtype)
        return None if error is None else InputRejection(error, "scaled_fp4_quant")

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        x2d = x.reshape(-1, x.shape[-1])
        xq, x_sf = scaled_fp4_quant(x2d, self.input_global_scale_inv)
        y = nvfp4_mm(xq, x_sf, self.weight, self.weight_scale, self.alpha, x.dtype)
        return y.reshape(*x.shape[:-1], self.output_size_per_partition), None
