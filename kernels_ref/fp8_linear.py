"""Native FP8 W8A8 linear reference (KERNELS_SPEC.md §2b).

Mirrors vLLM's ``Fp8LinearMethod`` (``quantization/fp8.py``) after
``process_weights_after_loading``, ``FP8ScaledMMLinearKernel.apply_weights``,
``QuantFP8.forward_native`` (dynamic per-token activation quantization) and
``ops.cutlass_scaled_mm``.

Its ``weight`` is fp8, so the dtype helper of vLLM PR #38771 returns ``None`` (keep the model
dtype, the layer quantizes itself) unless fp8 prefill is on. An fp8 input is treated as already
quantized with scale 1.0 (§0.3): vLLM only skips activation quantization for a
``QuantizedActivation``, and this matches ``use_fp8_prefill``'s unscaled casts.
"""

from __future__ import annotations

import torch
from torch import nn

from .formats import (
    FP8,
    FP8_MAX,
    FP8_MIN_SCALE,
    HALF_DTYPES,
    f32,
    matmul_fp32,
    quantize_fp8_weight,
    to_fp8,
    weight_fp8_scale,
)


def fp8_quant_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-token fp8 quantization of ``x[M,K]`` (any float dtype).

    In fp32, row by row: ``s = max(amax_row / 448, fp32(1/(448·512)))``, ``inv = 1/s``,
    ``xq = fp8(clamp(x · inv, ±448))``. Returns ``(xq [M,K] fp8, s [M,1] fp32)``.
    """
    xf = x.float()
    amax = xf.abs().amax(dim=-1, keepdim=True)
    scale = torch.maximum(amax / FP8_MAX, f32(FP8_MIN_SCALE, xf.device))
    inv = 1.0 / scale
    return to_fp8(xf * inv), scale


def fp8_scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """``cutlass_scaled_mm``: ``y[m,n] = ((Σ_k a·b in fp32) · scale_a[m]) · scale_b[n]`` to ``out_dtype``.

    ``a`` is fp8 ``[M,K]``, ``b`` fp8 ``[K,N]`` (any strides, e.g. the ``.t()`` view);
    ``scale_a`` has M or 1 elements, ``scale_b`` N or 1, both fp32. The two scale products are
    applied left to right in fp32, as the spec writes them.
    """
    if a.dtype != FP8 or b.dtype != FP8:
        raise RuntimeError(f"fp8_scaled_mm expects fp8 operands, got {a.dtype} and {b.dtype}")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise RuntimeError(
            f"fp8_scaled_mm shape mismatch: a {tuple(a.shape)} and b {tuple(b.shape)}"
        )
    m, n = a.shape[0], b.shape[1]
    if scale_a.numel() not in (1, m) or scale_b.numel() not in (1, n):
        raise RuntimeError(
            f"scale_a must have 1 or {m} elements and scale_b 1 or {n}, "
            f"got {scale_a.numel()} and {scale_b.numel()}"
        )
    acc = matmul_fp32(a.float(), b.float())
    y = acc * scale_a.float().reshape(-1, 1)
    y = y * scale_b.float().reshape(1, -1)
    return y.to(out_dtype)


class Fp8Linear(nn.Module):
    """FP8 W8A8 linear: fp8 ``weight`` ``(K,N)`` (the ``.t()`` view of a contiguous ``[N,K]``),
    fp32 ``weight_scale`` ``[N]`` (per channel) or ``[1]`` (per tensor), ``s = max(amax,1e-12)/448``.

    ``forward`` quantizes a 16-bit input per token, takes an fp8 input with scale 1, and raises
    ``RuntimeError`` for any other dtype. Output is in ``params_dtype``.
    """

    def __init__(
        self,
        weight: torch.Tensor,
        params_dtype: torch.dtype = torch.bfloat16,
        per_channel: bool = True,
    ) -> None:
        super().__init__()
        size_n, size_k = weight.shape
        wf = weight.float()
        if per_channel:
            scale = weight_fp8_scale(wf.abs().amax(dim=1))  # [N]
            codes = quantize_fp8_weight(wf, scale.unsqueeze(1))
        else:
            scale = weight_fp8_scale(wf.abs().amax().reshape(1))  # [1]
            codes = quantize_fp8_weight(wf, scale)
        self.weight = nn.Parameter(codes.t(), requires_grad=False)  # (K,N), strides (1,K)
        self.weight_scale = nn.Parameter(scale, requires_grad=False)
        self.params_dtype = params_dtype
        self.orig_dtype = params_dtype
        self.input_size_per_partition = size_k
        self.output_size_per_partition = size_n

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        x2d = x.reshape(-1, x.shape[-1])
        if x.dtype in HALF_DTYPES:
            xq, x_scale = fp8_quant_per_token(x2d)
        elif x.dtype == FP8:
            xq = x2d
            x_scale = torch.ones((x2d.shape[0], 1), dtype=torch.float32, device=x.device)
        else:
            raise RuntimeError(
                f"Fp8Linear: unsupported input dtype {x.dtype} "
                "(expected torch.float16, torch.bfloat16 or torch.float8_e4m3fn)"
            )
        y = fp8_scaled_mm(xq, self.weight, x_scale, self.weight_scale, self.params_dtype)
        return y.reshape(*x.shape[:-1], self.output_size_per_partition), None
