"""Unquantized and AWQ-like linear references.

``UnquantizedLinear`` mirrors ``UnquantizedLinearMethod``: ``weight[N,K]`` in ``params_dtype``.

``AwqLikeLinear`` mirrors ``BaseAWQLinearMethod.create_weights`` / ``AutoAWQLinearMethod.apply``
(``auto_awq.py``) with the nibble order of ``awq_triton.py``. It registers only ``qweight``,
``qzeros`` and ``scales``: it has no ``weight`` attribute at all, which is why the pre-fix MLA
code (``.to(self.kv_b_proj.weight.dtype)``) raises ``AttributeError`` on it and why the fixed
helper falls back to ``params_dtype``.
"""

from __future__ import annotations

import torch
from torch import nn

from .contracts import InputRejection
from .formats import div_exact, join_fields, matmul_fp32, uint_fields

AWQ_GROUP_SIZE = 64
AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble i of a word holds column 8j + ORDER[i]
AWQ_MAX_Q = 15


def unquantized_input_error(x_dtype: torch.dtype, weight_dtype: torch.dtype) -> RuntimeError | None:
    """``F.linear``'s dtype check, or None."""
    if x_dtype == weight_dtype:
        return None
    return RuntimeError(f"expected mat1 and mat2 to have the same dtype, but got: {x_dtype} != {weight_dtype}")


def unquantized_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ W.T`` for ``weight[N,K]``: fp32 accumulation, output in ``weight.dtype``, any
    leading dimensions on ``x``."""
    error = unquantized_input_error(x.dtype, weight.dtype)
    if error is not None:
        raise error
    x2d = x.reshape(-1, x.shape[-1])
    y = matmul_fp32(x2d.float(), weight.float().t()).to(weight.dtype)
    return y.reshape(*x.shape[:-1], weight.shape[0])


def awq_input_error(x_dtype: torch.dtype, params_dtype: torch.dtype) -> RuntimeError | None:
    if x_dtype == params_dtype:
        return None
    return RuntimeError(f"AwqLikeLinear: expected input dtype {params_dtype} (params_dtype), got {x_dtype}")


class UnquantizedLinear(nn.Module):
    """``y = x @ W.T`` with ``weight[N,K]`` in ``params_dtype``, fp32 accumulation, output in
    ``params_dtype``. An input of another dtype raises ``RuntimeError`` (as ``F.linear`` does)."""

    def __init__(self, weight: torch.Tensor, params_dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.to(params_dtype), requires_grad=False)
        self.params_dtype = params_dtype
        self.input_size_per_partition = weight.shape[1]
        self.output_size_per_partition = weight.shape[0]

    def input_rejection(self, dtype: torch.dtype) -> InputRejection | None:
        error = unquantized_input_error(dtype, self.weight.dtype)
        return None if error is None else InputRejection(error, "unquantized_linear")

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        return unquantized_linear(x, self.weight).to(self.params_dtype), None


# ----------------------------------------------------------------------------- AWQ


def awq_pack(values: torch.Tensor) -> torch.Tensor:
    """Pack 4-bit values ``[R, N]`` into int32 ``[R, N/8]`` in AWQ order: nibble i of word j is
    column ``8j + [0,2,4,6,1,3,5,7][i]``."""
    r, n = values.shape
    if n % 8:
        raise ValueError(f"N = {n} is not divisible by 8")
    order = torch.tensor(AWQ_PACK_ORDER, device=values.device)
    groups = values.to(torch.int64).reshape(r, n // 8, 8)[..., order]
    return join_fields(groups, 4)


def awq_unpack(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`awq_pack`: int32 ``[R, N/8]`` to int64 values ``[R, N]``."""
    fields = uint_fields(packed, 4, 8)  # [R, N/8, 8], field i = nibble i
    order = torch.tensor(AWQ_PACK_ORDER, device=packed.device)
    out = torch.empty_like(fields)
    out[..., order] = fields
    return out.reshape(packed.shape[0], -1)


def awq_quantize(
    w: torch.Tensor, params_dtype: torch.dtype, group_size: int = AWQ_GROUP_SIZE
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric 4-bit quantization of ``W[N,K]`` per (K-group, column), in fp32.

    ``mn = min(0, min w)``, ``mx = max(0, max w)``, ``s = (mx - mn)/15`` stored in
    ``params_dtype``; the stored (rounded) ``s`` is the one used below, so quantization and
    dequantization share one grid. ``z = clamp(round(-mn/s), 0, 15)``,
    ``q = clamp(round(w/s) + z, 0, 15)``, ``round`` half to even. A group of all zeros has
    ``s = 0``; it divides by 1 instead, giving ``q = z = 0``.

    Returns ``(q [K,N] int64, z [K/G,N] int64, scales [K/G,N] params_dtype)``.
    """
    size_n, size_k = w.shape
    if size_k % group_size:
        raise ValueError(f"K = {size_k} is not divisible by group_size = {group_size}")
    wt = w.float().t().reshape(size_k // group_size, group_size, size_n)  # [G, gs, N]
    zero = torch.zeros((), dtype=torch.float32, device=w.device)
    mn = torch.minimum(wt.amin(dim=1), zero)
    mx = torch.maximum(wt.amax(dim=1), zero)
    scales = div_exact(mx - mn, AWQ_MAX_Q).to(params_dtype)  # [G, N]
    s = scales.float()
    s = torch.where(s == 0, torch.ones_like(s), s)
    z = torch.round(-mn / s).clamp(0, AWQ_MAX_Q)
    q = (torch.round(wt / s.unsqueeze(1)) + z.unsqueeze(1)).clamp(0, AWQ_MAX_Q)
    return q.reshape(size_k, size_n).to(torch.int64), z.to(torch.int64), scales


def check_awq(qweight, qzeros, scales, group_size) -> tuple[int, int]:
    """Shapes and dtypes of the AWQ tensors (shared with the CUDA wrapper); returns ``(K, N)``."""
    if qweight.dtype != torch.int32 or qzeros.dtype != torch.int32:
        raise RuntimeError("awq: qweight and qzeros must be int32")
    size_k, size_n = qweight.shape[0], qweight.shape[1] * 8
    if group_size <= 0 or size_k % group_size:
        raise RuntimeError(f"awq: K = {size_k} is not divisible by group_size = {group_size}")
    if tuple(qzeros.shape) != (size_k // group_size, size_n // 8) or tuple(scales.shape) != (size_k // group_size, size_n):
        raise RuntimeError(
            f"awq: expected qzeros {(size_k // group_size, size_n // 8)} and scales "
            f"{(size_k // group_size, size_n)}, got {tuple(qzeros.shape)} and {tuple(scales.shape)}"
        )
    return size_k, size_n


def awq_dequantize(
    qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, group_size: int
) -> torch.Tensor:
    """``round_act((q - z) · s)``: the product in fp32, one rounding to ``scales.dtype``; ``[K,N]``."""
    check_awq(qweight, qzeros, scales, group_size)
    q = awq_unpack(qweight)
    z = awq_unpack(qzeros).repeat_interleave(group_size, dim=0)
    s = scales.float().repeat_interleave(group_size, dim=0)
    return ((q - z).float() * s).to(scales.dtype)


class AwqLikeLinear(nn.Module):
    """AWQ int4 g64 linear built from an fp32 ``W[N,K]``.

    Parameters: ``qweight`` int32 ``[K,N/8]``, ``qzeros`` int32 ``[K/G,N/8]``,
    ``scales[K/G,N]`` in ``params_dtype``. There is deliberately no ``weight`` attribute
    (``hasattr(layer, "weight")`` is False). The input dtype must equal ``params_dtype``
    (``RuntimeError`` otherwise); output ``x @ deq`` with fp32 accumulation, in ``params_dtype``.
    """

    def __init__(
        self,
        weight: torch.Tensor,
        params_dtype: torch.dtype = torch.bfloat16,
        group_size: int = AWQ_GROUP_SIZE,
    ) -> None:
        super().__init__()
        size_n, size_k = weight.shape
        q, z, scales = awq_quantize(weight, params_dtype, group_size)
        self.qweight = nn.Parameter(awq_pack(q), requires_grad=False)
        self.qzeros = nn.Parameter(awq_pack(z), requires_grad=False)
        self.scales = nn.Parameter(scales, requires_grad=False)
        self.params_dtype = params_dtype
        self.group_size = group_size
        self.input_size_per_partition = size_k
        self.output_size_per_partition = size_n

    def input_rejection(self, dtype: torch.dtype) -> InputRejection | None:
        error = awq_input_error(dtype, self.params_dtype)
        return None if error is None else InputRejection(error, "forward")

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        rejection = self.input_rejection(x.dtype)
        if rejection is not None:
            raise rejection.error
        y = awq_gemm(x, self.qweight, self.qzeros, self.scales, self.group_size)
        return y.to(self.params_dtype), None


def awq_gemm(x, qweight, qzeros, scales, group_size) -> torch.Tensor:
    """``x @ deq`` in fp32, output in ``scales.dtype``, any leading dimensions on ``x``."""
    deq = awq_dequantize(qweight, qzeros, scales, group_size)
    x2d = x.reshape(-1, x.shape[-1])
    y = matmul_fp32(x2d.float(), deq.float()).to(scales.dtype)
    return y.reshape(*x.shape[:-1], deq.shape[1])
