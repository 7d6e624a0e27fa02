"""W8A8-INT8 linear reference: int8 weight storage, dynamic per-token int8 activations.

Mirrors the shape of vLLM's W8A8 int8 path (compressed-tensors ``W8A8Int8`` with a
``CutlassInt8ScaledMMLinearKernel``): ``weight`` is int8 ``(K,N)`` (the ``.t()`` view of a
contiguous ``[N,K]``), ``weight_scale`` fp32 ``[N,1]``, and ``apply_weights`` quantizes the input
with ``ops.scaled_int8_quant`` before an int8 GEMM with fp32 scales.

Why it is in the matrix: its storage dtype is an integer type other than Marlin's int32 and
NVFP4's uint8. dtype-lint's helper maps any other integer storage to ``params_dtype``; vLLM
0.28.0's ``_get_kv_b_proj_input_dtype`` returns the storage dtype, so its fixed prefill feeds int8.

Contract: the input must be fp16/bf16/fp32. ``scaled_int8_quant`` dispatches its CUDA kernel on
the input dtype over the floating types only, so an int8 input raises PyTorch's dispatch error;
the text below is modelled on that dispatch macro (the kernel's C++ is not part of the ``.py``
tree this project reads), not copied from a run.
"""

from __future__ import annotations

import torch
from torch import nn

from .contracts import InputRejection
from .formats import div_exact, matmul_fp32

INT8_MAX = 127.0
_FLOAT_INPUTS = (torch.float16, torch.bfloat16, torch.float32)


def int8_input_error(dtype: torch.dtype) -> RuntimeError | None:
    if dtype in _FLOAT_INPUTS:
        return None
    type_name = {torch.int8: "Char", torch.uint8: "Byte", torch.int32: "Int", torch.float8_e4m3fn: "Float8_e4m3fn"}
    return RuntimeError(
        f'"dynamic_scaled_int8_quant_kernel" not implemented for \'{type_name.get(dtype, str(dtype))}\''
    )


def int8_quant_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric dynamic per-token int8 quantization of ``x[M,K]``, in fp32.

    ``s = amax_row / 127`` (a true division), ``q = clamp(round_half_even(x · (1/s)), ±127)``; an
    all-zero row gets ``s = 0`` and codes 0. Returns ``(q int8 [M,K], s fp32 [M,1])``.
    """
    xf = x.float()
    amax = xf.abs().amax(dim=-1, keepdim=True)
    scale = div_exact(amax, INT8_MAX)
    inv = torch.where(scale == 0, torch.zeros_like(scale), torch.reciprocal(scale))
    q = torch.round(xf * inv).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def int8_scaled_mm(a, b, scale_a, scale_b, out_dtype: torch.dtype) -> torch.Tensor:
    """``y[m,n] = ((Σ_k a·b) · scale_a[m]) · scale_b[n]`` to ``out_dtype``. The int8 products
    and their sums are exact in fp32 up to ``K · 127² < 2^24``, i.e. K ≤ 1040."""
    if a.dtype != torch.int8 or b.dtype != torch.int8:
        raise RuntimeError(f"int8_scaled_mm expects int8 operands, got {a.dtype} and {b.dtype}")
    acc = matmul_fp32(a.float(), b.float())
    return (acc * scale_a.float().reshape(-1, 1) * scale_b.float().reshape(1, -1)).to(out_dtype)


class Int8Linear(nn.Module):
    """W8A8-INT8 linear built from an fp32 ``W[N,K]``: per-channel symmetric int8 weights."""

    def __init__(self, weight: torch.Tensor, params_dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        size_n, size_k = weight.shape
        wf = weight.float()
        scale = div_exact(wf.abs().amax(dim=1, keepdim=True).clamp(min=1e-12), INT8_MAX)  # [N,1]
        codes = torch.round(wf / scale).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
        self.weight = nn.Parameter(codes.t(), requires_grad=False)  # (K,N), strides (1,K)
        self.weight_scale = nn.Parameter(scale, requires_grad=False)
        self.params_dtype = params_dtype
        self.input_size_per_partition = size_k
        self.output_size_per_partition = size_n

    def input_rejection(self, dtype: torch.dtype) -> InputRejection | None:
        error = int8_input_error(dtype)
        return None if error is None else InputRejection(error, "forward")

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        rejection = self.input_rejection(x.dtype)
        if rejection is not None:
            raise rejection.error
        x2d = x.reshape(-1, x.shape[-1])
        xq, xs = int8_quant_per_token(x2d)
        y = int8_scaled_mm(xq, self.weight, xs, self.weight_scale, self.params_dtype)
        return y.reshape(*x.shape[:-1], self.output_size_per_partition), None
