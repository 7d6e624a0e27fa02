"""Exact twins of the W8A8 and W4A4 rows: the same arithmetic, computed another way.

On the crash rows (Marlin, AWQ) the twin is an unquantized layer holding the dequantized weight
(:mod:`.backends`). A layer that quantizes its *input* too (native FP8 per token, NVFP4 per
16-block) cannot be replaced by a fixed weight, so its twin recomputes everything itself from
``W`` and the input, with the formats' documented rules written out here independently of the
layer's own quantizers:

* FP8 W8A8: the weight scale per output channel ``max(amax, 1e-12) / 448`` and the per-token
  input scale ``max(amax_row / 448, 1/(448·512))``, each ``amax`` reduced row by row with
  ``torch.max`` rather than ``amax``; codes by fp8's round-to-nearest-even cast;
* NVFP4: the 16-element block scales as the spec states them, and the e2m1 code of each value by
  a nearest-point search over the grid ``[0, .5, 1, 1.5, 2, 3, 4, 6]`` with ties to the even
  code, instead of the layer's threshold table.

Then the products are formed as the layer's GEMM forms them (fp32 ``matmul_fp32``, the scales
applied in the same order), so a correct layer equals its twin bit for bit, and a quantizer with
another granularity, a moved rounding threshold or another block size does not. The twin keeps a
``weight`` of the storage dtype (fp8, uint8) so that the helper decides for it as for the layer.
"""

from __future__ import annotations

import torch
from torch import nn

from ..contracts import InputRejection
from ..formats import FP8, f32, matmul_fp32
from ..fp8_linear import fp8_input_rejection
from ..nvfp4 import scaled_fp4_quant_input_error

_FP8_MAX = 448.0
_E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_NVFP4_BLOCK = 16


def _fp8(x: torch.Tensor) -> torch.Tensor:
    return x.float().clamp(-_FP8_MAX, _FP8_MAX).to(FP8)


def _row_max(x: torch.Tensor) -> torch.Tensor:
    return torch.max(x.abs(), dim=-1, keepdim=True).values


def _true_div(a: torch.Tensor, divisor: float) -> torch.Tensor:
    return a / torch.full_like(a, divisor)


class Fp8W8A8Twin(nn.Module):
    """Per-channel FP8 W8A8 (``Fp8Linear(per_channel=True)``), recomputed."""

    def __init__(self, w: torch.Tensor, params_dtype: torch.dtype, _amax: float = 0.0) -> None:
        super().__init__()
        wf = w.float()
        self.register_buffer("scale", _true_div(_row_max(wf).clamp(min=1e-12), _FP8_MAX).reshape(-1))  # [N]
        self.weight = nn.Parameter(_fp8(wf / self.scale.unsqueeze(1)), requires_grad=False)  # [N,K] fp8
        self.params_dtype = params_dtype
        self.output_size_per_partition = w.shape[0]

    def input_rejection(self, dtype: torch.dtype) -> InputRejection | None:
        return fp8_input_rejection("Fp8W8A8Twin", dtype)

    def forward(self, x: torch.Tensor):
        rejection = self.input_rejection(x.dtype)
        if rejection is not None:
            raise rejection.error
        x2d = x.reshape(-1, x.shape[-1])
        if x.dtype == FP8:
            xq, sx = x2d, torch.ones((x2d.shape[0], 1), dtype=torch.float32, device=x.device)
        else:
            xf = x2d.float()
            sx = torch.maximum(_true_div(_row_max(xf), _FP8_MAX), f32(1.0 / (_FP8_MAX * 512.0), xf.device))
            xq = _fp8(xf * torch.reciprocal(sx))
        acc = matmul_fp32(xq.float(), self.weight.float().t())
        y = (acc * sx.reshape(-1, 1)) * self.scale.reshape(1, -1)
        return y.to(self.params_dtype).reshape(*x.shape[:-1], self.output_size_per_partition), None


def _e2m1_nearest(v: torch.Tensor) -> torch.Tensor:
    """Signed e2m1 values of ``v`` (already within ±6): the nearest grid point, ties to the even
    code (index 0, 2, 4, 6), found by search."""
    grid = torch.tensor(_E2M1_GRID, dtype=torch.float64, device=v.device)
    mag = v.double().abs().unsqueeze(-1)
    dist = (mag - grid).abs()
    odd = (torch.arange(8, device=v.device) % 2).double()
    # A tie is an exact equality of distances here (fp32 inputs, fp64 differences): the odd code
    # loses it by a margin far below any real difference.
    best = torch.argmin(dist + odd * 1e-12, dim=-1)
    vals = grid[best].float()
    return torch.where(v < 0, -vals, vals)


def _nvfp4_dequant(x: torch.Tensor, gs_inv: torch.Tensor) -> torch.Tensor:
    """``e2m1 · sf`` of ``x[..., K]`` per 16-block, fp32, as the spec states the quantizer."""
    k = x.shape[-1]
    xf = x.float().reshape(*x.shape[:-1], k // _NVFP4_BLOCK, _NVFP4_BLOCK)
    vmax = torch.max(xf.abs(), dim=-1, keepdim=True).values
    sf = _fp8(gs_inv * (vmax * f32(1.0 / 6.0, xf.device))).float()
    osc = torch.where(sf == 0, torch.zeros_like(sf), torch.reciprocal(sf * torch.reciprocal(gs_inv)))
    vals = _e2m1_nearest((xf * osc).clamp(-6.0, 6.0))
    return (vals * sf).reshape(*x.shape[:-1], k)


class NvFp4Twin(nn.Module):
    """NVFP4 W4A4 (``NvFp4Linear``), recomputed from ``W`` and the calibrated input amax."""

    def __init__(self, w: torch.Tensor, params_dtype: torch.dtype, input_amax: float) -> None:
        super().__init__()
        w_gs = _true_div(f32(float(w.float().abs().max())), 2688.0)
        in_gs = _true_div(f32(float(input_amax)), 2688.0)
        self.register_buffer("wd", _nvfp4_dequant(w, torch.reciprocal(w_gs)))  # [N,K] fp32
        self.register_buffer("in_gs_inv", torch.reciprocal(in_gs))
        self.register_buffer("alpha", in_gs * w_gs)
        # The storage dtype the helper sees (the twin's own values are in wd).
        self.weight = nn.Parameter(torch.zeros(w.shape[0], w.shape[1] // 2, dtype=torch.uint8), requires_grad=False)
        self.params_dtype = params_dtype
        self.output_size_per_partition = w.shape[0]

    def input_rejection(self, dtype: torch.dtype) -> InputRejection | None:
        error = scaled_fp4_quant_input_error(dtype)
        return None if error is None else InputRejection(error, "scaled_fp4_quant")

    def forward(self, x: torch.Tensor):
        error = scaled_fp4_quant_input_error(x.dtype)  # None exactly for a 16-bit input
        if error is not None:
            raise error
        x2d = x.reshape(-1, x.shape[-1])
        xd = _nvfp4_dequant(x2d, self.in_gs_inv)
        y = (matmul_fp32(xd, self.wd.t()) * self.alpha).to(x.dtype)
        return y.reshape(*x.shape[:-1], self.output_size_per_partition), None
