"""Native FP8 W8A8 linear references: per-channel/per-tensor and DeepSeek's block-128 format.

Mirrors vLLM's ``Fp8LinearMethod`` (``quantization/fp8.py``) after
``process_weights_after_loading``, ``FP8ScaledMMLinearKernel.apply_weights``,
``QuantFP8.forward_native`` (dynamic per-token activation quantization) and
``ops.cutlass_scaled_mm``; :class:`Fp8BlockLinear` the block-quantized checkpoints
(``weight_block_size = [128, 128]``, ``apply_w8a8_block_fp8_linear`` with a dynamic 1x128
per-token-group activation quantizer).

Its ``weight`` is fp8, so the dtype helper of vLLM PR #38771 returns ``None`` (keep the model
dtype, the layer quantizes itself) unless fp8 prefill is on. An fp8 input is treated as already
quantized with scale 1.0: vLLM only skips activation quantization for a
``QuantizedActivation``, and this matches ``use_fp8_prefill``'s unscaled casts.
"""

from __future__ import annotations

import torch
from torch import nn

from .contracts import InputRejection
from .formats import (
    FP8,
    FP8_MAX,
    FP8_MIN_SCALE,
    HALF_DTYPES,
    div_exact,
    f32,
    matmul_fp32,
    quantize_fp8_weight,
    to_fp8,
    weight_fp8_scale,
)


def fp8_quant_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-token fp8 quantization of ``x[M,K]`` (any float dtype).

    In fp32, row by row: ``s = max(amax_row / 448, fp32(1/(448·512)))`` with a true division
    (:func:`formats.div_exact`, as the kernel's ``__fdiv_rn``), ``inv = 1/s`` (a reciprocal:
    IEEE division on both sides), ``xq = fp8(clamp(x · inv, ±448))``.
    Returns ``(xq [M,K] fp8, s [M,1] fp32)``.
    """
    xf = x.float()
    amax = xf.abs().amax(dim=-1, keepdim=True)
    scale = torch.maximum(div_exact(amax, FP8_MAX), f32(FP8_MIN_SCALE, xf.device))
    inv = torch.reciprocal(scale)
    return to_fp8(xf * inv), scale


def check_fp8_scaled_mm(a, b, scale_a, scale_b) -> None:
    """The argument checks of :func:`fp8_scaled_mm`, in order; the CUDA wrapper runs them too."""
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
    check_fp8_scaled_mm(a, b, scale_a, scale_b)
    acc = matmul_fp32(a.float(), b.float())
    y = acc * scale_a.float().reshape(-1, 1)
    y = y * scale_b.float().reshape(1, -1)
    return y.to(out_dtype)


def fp8_input_rejection(layer_name: str, dtype: torch.dtype) -> InputRejection | None:
    """What an FP8 W8A8 layer raises for an input of ``dtype``: 16-bit inputs are quantized,
    an fp8 input is taken as already quantized with unit scales (see the module doc)."""
    if dtype in HALF_DTYPES or dtype == FP8:
        return None
    return InputRejection(
        RuntimeError(
            f"{layer_name}: unsupported input dtype {dtype} "
            "(expected torch.float16, torch.bfloat16 or torch.float8_e4m3fn)"
        ),
        "forward",
    )


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

    def input_rejection(self, dtype: torch.dtype) -> InputRejection | None:
        return fp8_input_rejection(type(self).__name__, dtype)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        rejection = self.input_rejection(x.dtype)
        if rejection is not None:
            raise rejection.error
        x2d = x.reshape(-1, x.shape[-1])
        if x.dtype == FP8:
            xq = x2d
            x_scale = torch.ones((x2d.shape[0], 1), dtype=torch.float32, device=x.device)
        else:
            xq, x_scale = fp8_quant_per_token(x2d)
        y = fp8_scaled_mm(xq, self.weight, x_scale, self.weight_scale, self.params_dtype)
        return y.reshape(*x.shape[:-1], self.output_size_per_partition), None


# ----------------------------------------------------------------------------- block-128 FP8

#: DeepSeek-V3's ``weight_block_size``: 128 x 128 weight blocks, 1 x 128 activation groups.
FP8_BLOCK = 128
#: ``per_token_group_quant_fp8``'s floor on a group's amax.
FP8_GROUP_EPS = 1e-10


def fp8_quant_per_token_group(x: torch.Tensor, group_size: int = FP8_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """``per_token_group_quant_fp8`` (``fp8_utils.py``) on ``x[M,K]``, in fp32.

    Per 1 x ``group_size`` group: ``s = max(amax, 1e-10) · fp32(1/448)`` (upstream multiplies by
    the reciprocal here, on purpose; a multiply is the same on every device), then
    ``xq = fp8(clamp(x / s, ±448))`` with a true division. Returns ``(xq [M,K], s [M,K/group])``.
    """
    m, k = x.shape
    if k % group_size:
        raise ValueError(f"K = {k} is not divisible by group_size = {group_size}")
    xf = x.float().reshape(m, k // group_size, group_size)
    amax = xf.abs().amax(dim=-1, keepdim=True).clamp(min=FP8_GROUP_EPS)
    scale = amax * f32(1.0 / FP8_MAX, xf.device)
    xq = to_fp8(xf / scale.expand_as(xf))
    return xq.reshape(m, k), scale.squeeze(-1)


def fp8_block_scaled_mm(
    a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
    out_dtype: torch.dtype, block: int = FP8_BLOCK,
) -> torch.Tensor:
    """``w8a8_block_fp8_matmul``: ``a[M,K]`` fp8 with ``a_scale[M,K/block]``, ``b[N,K]`` fp8 with
    ``b_scale[ceil(N/block), K/block]``; per K-block ``g`` in order, in fp32,
    ``acc += (Σ_{k∈g} a·b) · a_scale[m,g] · b_scale[n//block, g]``; output in ``out_dtype``."""
    if a.dtype != FP8 or b.dtype != FP8:
        raise RuntimeError(f"fp8_block_scaled_mm expects fp8 operands, got {a.dtype} and {b.dtype}")
    m, k = a.shape
    n = b.shape[0]
    groups = k // block
    col_scale = b_scale.float().repeat_interleave(block, dim=0)[:n]  # [N, K/block]
    acc = torch.zeros((m, n), dtype=torch.float32, device=a.device)
    for g in range(groups):
        ks = slice(g * block, (g + 1) * block)
        part = matmul_fp32(a[:, ks].float(), b[:, ks].float().t())
        acc = acc + part * a_scale[:, g : g + 1].float() * col_scale[:, g].reshape(1, n)
    return acc.to(out_dtype)


class Fp8BlockLinear(nn.Module):
    """DeepSeek-style block FP8 W8A8: fp8 ``weight[N,K]`` with ``weight_scale_inv`` fp32
    ``[ceil(N/128), K/128]`` (``s = max(amax_block, 1e-12)/448``); a 16-bit input is quantized per
    1x128 token group, an fp8 input is taken with unit scales. Output in ``params_dtype``."""

    def __init__(self, weight: torch.Tensor, params_dtype: torch.dtype = torch.bfloat16, block: int = FP8_BLOCK) -> None:
        super().__init__()
        size_n, size_k = weight.shape
        if size_k % block:
            raise ValueError(f"K = {size_k} is not divisible by the block size {block}")
        nb = -(-size_n // block)
        wf = torch.zeros(nb * block, size_k, dtype=torch.float32)
        wf[:size_n] = weight.float()
        blocks = wf.reshape(nb, block, size_k // block, block)
        scale = weight_fp8_scale(blocks.abs().amax(dim=(1, 3)))  # [N/128, K/128]
        codes = quantize_fp8_weight(blocks, scale[:, None, :, None]).reshape(nb * block, size_k)[:size_n]
        self.weight = nn.Parameter(codes.contiguous(), requires_grad=False)
        self.weight_scale_inv = nn.Parameter(scale, requires_grad=False)
        self.weight_block_size = [block, block]
        self.params_dtype = params_dtype
        self.orig_dtype = params_dtype
        self.input_size_per_partition = size_k
        self.output_size_per_partition = size_n

    def input_rejection(self, dtype: torch.dtype) -> InputRejection | None:
        return fp8_input_rejection(type(self).__name__, dtype)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        rejection = self.input_rejection(x.dtype)
        if rejection is not None:
            raise rejection.error
        block = self.weight_block_size[1]
        x2d = x.reshape(-1, x.shape[-1])
        if x.dtype == FP8:
            xq = x2d
            xs = torch.ones((x2d.shape[0], x2d.shape[1] // block), dtype=torch.float32, device=x.device)
        else:
            xq, xs = fp8_quant_per_token_group(x2d, block)
        y = fp8_block_scaled_mm(xq, xs, self.weight, self.weight_scale_inv, self.params_dtype, block)
        return y.reshape(*x.shape[:-1], self.output_size_per_partition), None
