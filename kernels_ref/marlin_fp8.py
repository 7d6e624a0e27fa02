"""Marlin W8A16 FP8 reference.

Mirrors vLLM's ``prepare_fp8_layer_for_marlin``, ``pack_fp8_to_int32``,
``fp8_fused_exponent_bias_into_scales`` and ``apply_fp8_marlin_linear``
(``quantization/utils/marlin_utils_fp8.py``), ``marlin_permute_scales``/``get_scale_perms``
(``marlin_utils.py``), the 8-bit ``gptq_marlin_repack_kernel`` with ``is_a_8bit=False``
(``csrc/quantization/marlin/gptq_marlin_repack.cu``) and the dtype contract of
``ops.marlin_gemm`` (``csrc/quantization/marlin/marlin.cu``).

Why this layer matters to dtype-lint: its ``weight`` is int32, so the pre-fix MLA code
(``kv_c_normed.to(self.kv_b_proj.weight.dtype)``) hands Marlin an int32 activation and
``marlin_gemm`` raises ``unsupported `a` scalar_type``.

The stored layout is Marlin's real one, including the thread-tile padding of
``marlin_padded_nk`` (a layer whose N or K fits neither tile family is zero-padded at weight
preparation; activations are padded and outputs sliced on every forward). The compute is a plain
dequantize-then-matmul. Left out: ``g_idx``/``perm``, zero points, bias, ``a_scales``, workspace,
atomic-add and fp32-reduce options.

Upstream contract only: ``marlin_gemm`` checks ``a``'s dtype and the shapes, never ``b_scales``'s
dtype. A 16-bit ``b_scales`` of the other 16-bit type is read as ``a``'s type, bit for bit, as the
kernel does (garbage, silently); only a ``b_scales`` of another width, which the kernel would read
out of bounds, is refused, and that refusal is marked reference-only.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .contracts import InputRejection
from .formats import (
    FP8,
    HALF_DTYPES,
    fp8_bytes,
    fp8_from_bytes,
    int16_from_uint16,
    join_fields,
    matmul_fp32,
    quantize_fp8_weight,
    uint_fields,
    weight_fp8_scale,
)

TILE_K = 16  # marlin::tile_size / tile_k_size
TILE_N = 64  # marlin::tile_n_size
MIN_THREAD_N = 64  # marlin::min_thread_n
DEEPSEEK_GROUP_SIZE = 128

#: The fp8 exponent bias Marlin's bit-placement dequant leaves out, per activation dtype:
#: 2^(2^(e-1) - 2^3) with e = 5 (fp16) or 8 (bf16).
EXPONENT_BIAS = {torch.float16: 8, torch.bfloat16: 120}

_MARLIN_BYTE_ORDER = (0, 2, 1, 3)  # `pack_idx` of the 8-bit repack: byte slot of vals[i]


# ----------------------------------------------------------------------------- quantize


def marlin_quantize_fp8(
    w: torch.Tensor, group_size: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``W[N,K]`` to fp8 codes ``C[K,N]`` and fp32 scales ``[G,N]``.

    ``group_size=None`` (or -1, or K) is per output channel: ``G=1``, ``s[n] = max(amax_n,1e-12)/448``.
    ``group_size=128`` (DeepSeek's block size along K) gives ``G=K/128`` and
    ``s[g,n] = max(amax over W[n, g·128:(g+1)·128], 1e-12)/448``. The ``1e-12`` floor only
    matters for all-zero groups (it avoids 0/0). Codes are ``fp8(clamp(W/s, ±448))`` in fp32.
    """
    if w.dim() != 2:
        raise ValueError(f"W must be 2-D [N,K], got shape {tuple(w.shape)}")
    size_n, size_k = w.shape
    if group_size in (None, -1):
        group_size = size_k
    if group_size <= 0 or size_k % group_size:
        raise ValueError(f"size_k = {size_k} is not divisible by group_size = {group_size}")
    wf = w.float()
    groups = size_k // group_size
    blocks = wf.reshape(size_n, groups, group_size)
    scales = weight_fp8_scale(blocks.abs().amax(dim=-1))  # [N,G]
    codes = quantize_fp8_weight(blocks, scales.unsqueeze(-1)).reshape(size_n, size_k)
    return codes.t().contiguous(), scales.t().contiguous()


# ----------------------------------------------------------------------------- packing


def pack_fp8_to_int32(fp8_tensor: torch.Tensor, size_k_first: bool = True) -> torch.Tensor:
    """GPTQ-style packing of fp8 codes into int32 words, four k per word.

    ``size_k_first=True``: ``C[K,N]`` to ``q[K/4,N]`` where little-endian byte j of word
    ``(i,n)`` is ``C[4i+j, n]``. ``size_k_first=False``: ``C[N,K]`` to ``[N,K/4]``, byte j of
    ``(n,i)`` is ``C[n,4i+j]`` (vLLM's two modes).
    """
    check_pack_fp8_to_int32(fp8_tensor, size_k_first)
    raw = fp8_bytes(fp8_tensor.contiguous()).to(torch.int64)
    if size_k_first:
        k, n = raw.shape
        return join_fields(raw.reshape(k // 4, 4, n).permute(0, 2, 1), 8)
    n, k = raw.shape
    return join_fields(raw.reshape(n, k // 4, 4), 8)


def check_pack_fp8_to_int32(fp8_tensor: torch.Tensor, size_k_first: bool = True) -> None:
    """The argument checks of :func:`pack_fp8_to_int32` (shared with the CUDA wrapper)."""
    if fp8_tensor.dtype != FP8:
        raise TypeError(f"expected {FP8}, got {fp8_tensor.dtype}")
    if fp8_tensor.dim() != 2:
        raise ValueError("expected a 2-D tensor")
    k = fp8_tensor.shape[0] if size_k_first else fp8_tensor.shape[1]
    if k % 4:
        raise ValueError(f"size_k = {k} is not divisible by 4")


def unpack_fp8_from_int32(q: torch.Tensor) -> torch.Tensor:
    """Inverse of ``pack_fp8_to_int32(C, size_k_first=True)``: ``q[K/4,N]`` to ``C[K,N]``."""
    fields = uint_fields(q, 8, 4)  # [K/4, N, 4]
    k4, n, _ = fields.shape
    raw = fields.permute(0, 2, 1).reshape(k4 * 4, n).to(torch.uint8)
    return fp8_from_bytes(raw)


def marlin_fp8_byte_positions(size_k: int, size_n: int, device=None) -> torch.Tensor:
    """Flat byte offset in the repacked ``int32[K/16, 4N]`` tensor of every element ``(k,n)``.

    The offset is ``(row·4N + col)·4 + byte`` with::

        kk=k%16; nn=n%64; w=nn//16; c=nn%16; half=c//8; t=4*(c%8)+(kk%8)//2; i=(kk%2)+2*(kk//8)
        row=k//16; col=(n//64)*256+t*8+w*2+half; byte=[0,2,1,3][i]

    Here ``w`` is the warp, ``t`` the thread, ``half`` picks ``res1``/``res2`` and ``i`` the
    ``vals`` slot of the CUDA kernel; :func:`marlin_repack_fp8_loop` is the literal transcription
    this formula was checked against. Returns int64 ``[K,N]``.
    """
    k = torch.arange(size_k, device=device, dtype=torch.int64).unsqueeze(1)
    n = torch.arange(size_n, device=device, dtype=torch.int64).unsqueeze(0)
    kk = k % 16
    nn_ = n % 64
    w = nn_ // 16
    c = nn_ % 16
    half = c // 8
    t = 4 * (c % 8) + (kk % 8) // 2
    i = (kk % 2) + 2 * (kk // 8)
    row = k // 16
    col = (n // 64) * 256 + t * 8 + w * 2 + half
    byte_of_i = torch.tensor(_MARLIN_BYTE_ORDER, device=device, dtype=torch.int64)
    return (row * (4 * size_n) + col) * 4 + byte_of_i[i]


def check_repack_shape(q: torch.Tensor, size_k: int, size_n: int) -> None:
    if size_k % TILE_K:
        raise RuntimeError(f"size_k = {size_k} is not divisible by tile_k_size = {TILE_K}")
    if size_n % TILE_N:
        raise RuntimeError(f"size_n = {size_n} is not divisible by tile_n_size = {TILE_N}")
    if q.dtype != torch.int32:
        raise RuntimeError("b_q_weight type is not kInt")
    if q.dim() != 2 or q.size(0) != size_k // 4:
        raise RuntimeError(
            f"Shape mismatch: b_q_weight.size(0) = {q.size(0)}, size_k = {size_k}, pack_factor = 4"
        )
    if q.size(1) != size_n:
        raise RuntimeError(f"b_q_weight.size(1) = {q.size(1)} is not size_n = {size_n}")


def marlin_repack_fp8(q: torch.Tensor, size_k: int, size_n: int) -> torch.Tensor:
    """``gptq_marlin_repack`` for 8-bit weights: ``q[K/4,N]`` int32 to ``int32[K/16, 4N]``."""
    check_repack_shape(q, size_k, size_n)
    codes = uint_fields(q, 8, 4).permute(0, 2, 1).reshape(size_k, size_n)  # C[k,n] as int64
    pos = marlin_fp8_byte_positions(size_k, size_n, device=q.device)
    out = torch.zeros(size_k * size_n, dtype=torch.int64, device=q.device)
    out[pos.reshape(-1)] = codes.reshape(-1)
    return join_fields(out.reshape(size_k // TILE_K, 4 * size_n, 4), 8)


def marlin_unrepack_fp8(b_q_weight: torch.Tensor, size_k: int, size_n: int) -> torch.Tensor:
    """Inverse of :func:`marlin_repack_fp8`: ``int32[K/16,4N]`` back to GPTQ ``q[K/4,N]``."""
    return pack_fp8_to_int32(marlin_fp8_codes(b_q_weight, size_k, size_n))


def marlin_fp8_codes(b_q_weight: torch.Tensor, size_k: int, size_n: int) -> torch.Tensor:
    """The fp8 codes ``C[K,N]`` stored in a Marlin-repacked ``int32[K/16,4N]`` tensor."""
    if b_q_weight.shape != (size_k // TILE_K, 4 * size_n):
        raise ValueError(
            f"expected b_q_weight of shape {(size_k // TILE_K, 4 * size_n)}, "
            f"got {tuple(b_q_weight.shape)}"
        )
    flat = uint_fields(b_q_weight, 8, 4).reshape(-1)
    pos = marlin_fp8_byte_positions(size_k, size_n, device=b_q_weight.device)
    return fp8_from_bytes(flat[pos].to(torch.uint8))


def marlin_repack_fp8_loop(q: torch.Tensor, size_k: int, size_n: int) -> torch.Tensor:
    """Literal Python transcription of ``gptq_marlin_repack_kernel<.., 8, false>`` (slow).

    Walks k-tiles, n-tiles, the 4 repacking warps and their 32 threads the way the kernel does,
    with the shared-memory stage spelled out; only for small shapes in tests, as an
    independent check of :func:`marlin_fp8_byte_positions`.
    """
    check_repack_shape(q, size_k, size_n)
    pack_factor, num_bits = 4, 8
    tile_ints = TILE_K // pack_factor  # 4
    stage_n_threads = TILE_N // 4  # 16 int4 loads per k row
    k_tiles, n_tiles = size_k // TILE_K, size_n // TILE_N
    tile_size = TILE_K * TILE_N // pack_factor  # 256 words per tile
    tc_offsets = (0, 1, 8, 9)
    pack_idx = (0, 2, 1, 3)
    mask = (1 << num_bits) - 1

    src = [[v & 0xFFFFFFFF for v in row] for row in q.tolist()]
    out = [0] * (k_tiles * n_tiles * tile_size)
    for k_tile_id in range(k_tiles):
        for n_tile_id in range(n_tiles):
            # fetch_to_shared: stage_k_threads x stage_n_threads int4 = tile_ints x 64 uint32
            first_n = n_tile_id * TILE_N
            first_k_packed = k_tile_id * TILE_K // pack_factor
            sh = [0] * (tile_ints * TILE_N)
            for thread in range(tile_ints * stage_n_threads):
                k_id, n_id = divmod(thread, stage_n_threads)
                for e in range(4):
                    sh[(k_id * stage_n_threads + n_id) * 4 + e] = src[first_k_packed + k_id][
                        first_n + n_id * 4 + e
                    ]
            # repack_tile
            out_offset = (k_tile_id * n_tiles + n_tile_id) * tile_size
            for warp_id in range(4):
                for th_id in range(32):
                    tc_col = th_id // 4
                    tc_row = (th_id % 4) * 2
                    cur_n = warp_id * 16 + tc_col
                    b1 = [sh[cur_n + TILE_N * i] for i in range(tile_ints)]
                    b2 = [sh[cur_n + 8 + TILE_N * i] for i in range(tile_ints)]
                    vals = [0] * 8
                    for i in range(4):
                        cur_elem = tc_row + tc_offsets[i]
                        cur_int, cur_pos = divmod(cur_elem, pack_factor)
                        vals[i] = (b1[cur_int] >> (cur_pos * num_bits)) & mask
                        vals[4 + i] = (b2[cur_int] >> (cur_pos * num_bits)) & mask
                    res1 = res2 = 0
                    for i in range(4):
                        res1 |= vals[pack_idx[i]] << (i * 8)
                        res2 |= vals[4 + pack_idx[i]] << (i * 8)
                    out[out_offset + th_id * 8 + warp_id * 2 + 0] = res1
                    out[out_offset + th_id * 8 + warp_id * 2 + 1] = res2
    signed = [v - (1 << 32) if v >= (1 << 31) else v for v in out]
    return torch.tensor(signed, dtype=torch.int32, device=q.device).reshape(
        size_k // TILE_K, 4 * size_n
    )


# ----------------------------------------------------------------------------- scales


def get_scale_perms() -> tuple[list[int], list[int]]:
    """vLLM ``get_scale_perms``: (``scale_perm`` of 64 for groups, ``scale_perm_single`` of 32)."""
    scale_perm: list[int] = []
    for i in range(8):
        scale_perm.extend([i + 8 * j for j in range(8)])
    scale_perm_single: list[int] = []
    for i in range(4):
        scale_perm_single.extend([2 * i + j for j in [0, 1, 8, 9, 16, 17, 24, 25]])
    return scale_perm, scale_perm_single


def _perm_for(num_groups: int) -> list[int]:
    scale_perm, scale_perm_single = get_scale_perms()
    return scale_perm_single if num_groups == 1 else scale_perm


def marlin_permute_scales(s: torch.Tensor, size_k: int, size_n: int, group_size: int) -> torch.Tensor:
    """vLLM ``marlin_permute_scales``: ``scale_perm`` if ``group_size < size_k`` (and not -1),
    else ``scale_perm_single``; the shape ``[G,N]`` is kept."""
    scale_perm, scale_perm_single = get_scale_perms()
    if group_size < size_k and group_size != -1:
        s = s.reshape((-1, len(scale_perm)))[:, scale_perm]
    else:
        s = s.reshape((-1, len(scale_perm_single)))[:, scale_perm_single]
    return s.reshape((-1, size_n)).contiguous()


def marlin_unpermute_scales(s: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`marlin_permute_scales` for a ``[G,N]`` tensor (G==1 means per channel)."""
    num_groups, size_n = s.shape
    perm = torch.tensor(_perm_for(num_groups), device=s.device)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel(), device=s.device)
    return s.reshape(-1, perm.numel())[:, inv].reshape(num_groups, size_n).contiguous()


def fp8_fused_exponent_bias_into_scales(scales: torch.Tensor) -> torch.Tensor:
    """Multiply fp16 scales by 2^8 and bf16 scales by 2^120, in the scales' dtype.

    Marlin places the fp8 bits into a 16-bit float without fixing the exponent bias, so each
    placed value is ``fp8 · 2^-8`` (fp16) or ``fp8 · 2^-120`` (bf16); the scale carries the
    difference. A power-of-two product is exact unless it overflows.
    """
    if scales.dtype not in EXPONENT_BIAS:
        raise ValueError(f"Marlin FP8 scales must be fp16 or bf16, got {scales.dtype}")
    return scales * (2.0 ** EXPONENT_BIAS[scales.dtype])


# ----------------------------------------------------------------------------- dequant + gemm


def place_fp8_bits(codes: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Marlin's bit-placement dequant: fp8 codes to ``dtype`` values ``fp8 · 2^-bias``, exactly.

    fp16: ``((b&0x80)<<8)|((b&0x7F)<<7)``; bf16: ``((b&0x80)<<8)|((b&0x7F)<<4)``.
    """
    shift = {torch.float16: 7, torch.bfloat16: 4}[dtype]
    b = fp8_bytes(codes).to(torch.int32)
    bits = ((b & 0x80) << 8) | ((b & 0x7F) << shift)
    return int16_from_uint16(bits).view(dtype)


def marlin_dequantize_fp8(
    b_q_weight: torch.Tensor, b_scales: torch.Tensor, size_k: int, size_n: int, dtype: torch.dtype
) -> torch.Tensor:
    """``deq[K,N]`` in ``dtype``: placed bits times the fused scale in fp32, rounded once."""
    codes = marlin_fp8_codes(b_q_weight, size_k, size_n)
    scales = marlin_unpermute_scales(b_scales).float()  # [G,N]
    group_size = size_k // scales.shape[0]
    per_k = scales.repeat_interleave(group_size, dim=0)  # [K,N]
    return (place_fp8_bits(codes, dtype).float() * per_k).to(dtype)


def marlin_a_dtype_error(dtype: torch.dtype) -> RuntimeError | None:
    """``marlin_gemm``'s check of ``a``'s dtype (``marlin.cu``): None for fp16/bf16."""
    if dtype in HALF_DTYPES:
        return None
    if dtype in (FP8, torch.int8):
        return RuntimeError("the a_scales parameter must be passed for 8bit activation.")
    return RuntimeError("unsupported `a` scalar_type")


def check_marlin_gemm(a, b_q_weight, b_scales, size_m: int, size_n: int, size_k: int) -> None:
    """The argument checks of :func:`marlin_gemm`, in vLLM's order and with its messages; the
    CUDA wrapper (`ops.py`) runs the same function so both fail identically."""
    error = marlin_a_dtype_error(a.dtype)
    if error is not None:
        raise error

    if a.dim() != 2:
        raise RuntimeError(f"a must be 2-D, got {a.dim()}-D")
    if a.size(0) != size_m:
        raise RuntimeError(f"Shape mismatch: a.size(0) = {a.size(0)}, size_m = {size_m}")
    if a.size(1) != size_k:
        raise RuntimeError(f"Shape mismatch: a.size(1) = {a.size(1)}, size_k = {size_k}")
    if size_k % TILE_K:
        raise RuntimeError(f"size_k = {size_k} is not divisible by tile_size = {TILE_K}")
    if b_q_weight.dtype != torch.int32:
        raise RuntimeError("b_q_weight type is not kInt")
    if b_q_weight.dim() != 2 or b_q_weight.size(0) != size_k // TILE_K:
        raise RuntimeError(
            f"Shape mismatch: b_q_weight.size(0) = {b_q_weight.size(0)}, size_k = {size_k}, "
            f"tile_size = {TILE_K}"
        )
    if b_q_weight.size(1) % TILE_K:
        raise RuntimeError(
            f"b_q_weight.size(1) = {b_q_weight.size(1)} is not divisible by tile_size = {TILE_K}"
        )
    actual_size_n = (b_q_weight.size(1) // TILE_K) * 4
    if size_n != actual_size_n:
        raise RuntimeError(f"size_n = {size_n}, actual_size_n = {actual_size_n}")
    if b_scales.dim() != 2:
        raise RuntimeError(f"b_scales rank = {b_scales.dim()} is not 2")
    if b_scales.size(1) != size_n:
        raise RuntimeError(f"b_scales dim 1 = {b_scales.size(1)} is not size_n = {size_n}")
    num_groups = b_scales.size(0)
    if num_groups > 1 and size_k % num_groups:
        raise RuntimeError(
            f"size_k = {size_k}, is not divisible by b_scales.size(0) = {num_groups}"
        )
    if size_n % MIN_THREAD_N:
        raise RuntimeError(f"size_n = {size_n}, is not divisible by min_thread_n = {MIN_THREAD_N}")
    if b_scales.element_size() != a.element_size():
        # Reference-only: the kernel would read a wider b_scales as 16-bit words, out of step.
        raise RuntimeError(
            f"reference-only check: b_scales ({b_scales.dtype}) is not a 16-bit tensor; "
            "marlin_gemm reads it as a's type"
        )


def marlin_gemm(
    a: torch.Tensor,
    b_q_weight: torch.Tensor,
    b_scales: torch.Tensor,
    size_m: int,
    size_n: int,
    size_k: int,
) -> torch.Tensor:
    """``ops.marlin_gemm`` for fp8 weights: ``c[M,N] = a @ deq`` with fp32 accumulation, in ``a.dtype``.

    Checks, in this order:

    1. ``a`` dtype: fp16/bf16 pass; fp8/int8 raise ``the a_scales parameter must be passed for
       8bit activation.``; anything else raises ``unsupported `a` scalar_type``. All RuntimeError.
       (Real vLLM runs the A/B shape checks between these two dtype errors; for well-shaped
       inputs the outcome is the same.)
    2. vLLM's shape checks on ``a``, ``b_q_weight``, ``b_scales`` (texts as in ``marlin.cu``).

    ``b_scales`` is read as ``a``'s type (a bit reinterpretation, as the kernel does).
    """
    check_marlin_gemm(a, b_q_weight, b_scales, size_m, size_n, size_k)
    if size_m == 0:
        return torch.empty((0, size_n), dtype=a.dtype, device=a.device)
    deq = marlin_dequantize_fp8(b_q_weight, b_scales.view(a.dtype), size_k, size_n, a.dtype)
    return matmul_fp32(a.float(), deq.float()).to(a.dtype)


# ----------------------------------------------------------------------------- tile padding


def marlin_padded_nk(size_n: int, size_k: int, group_size: int = -1) -> tuple[int, int]:
    """vLLM ``marlin_padded_nk``: the smallest ``(padded_n, padded_k)`` of one of Marlin's two
    thread-tile families, ``(n%64, k%128)`` or ``(n%128, k%64)``, with K kept a multiple of the
    group size; ties go to the smaller area, then the smaller sum."""
    group = group_size if group_size > 0 else 1

    def round_up(x: int, m: int) -> int:
        return -(-x // m) * m

    candidates = (
        (round_up(size_n, 64), round_up(size_k, math.lcm(128, group))),
        (round_up(size_n, 128), round_up(size_k, math.lcm(64, group))),
    )
    return min(candidates, key=lambda nk: (nk[0] * nk[1], nk[0] + nk[1]))


def _pad2d(t: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Zero-pad a 2-D tensor to ``[rows, cols]`` (fp8 zero is code 0, which decodes to 0.0)."""
    if tuple(t.shape) == (rows, cols):
        return t
    raw = t.view(torch.uint8) if t.dtype == FP8 else t
    out = torch.zeros((rows, cols), dtype=raw.dtype, device=t.device)
    out[: t.shape[0], : t.shape[1]] = raw
    return out.view(FP8) if t.dtype == FP8 else out


# ----------------------------------------------------------------------------- layer


class MarlinFp8Linear(nn.Module):
    """A weight-only FP8 linear in Marlin's storage, as after ``prepare_fp8_layer_for_marlin``.

    Built from an fp32 ``W[N,K]``; ``weight`` is int32 ``[K/16, 4N]`` and ``weight_scale`` is
    ``[G,N]`` in ``params_dtype`` (permuted, exponent bias fused), both at the padded shape
    ``padded_nk`` of :func:`marlin_padded_nk`. The input must be fp16/bf16; an int32 input fails
    inside :func:`marlin_gemm` exactly like vLLM's pre-fix MLA path does.
    """

    def __init__(
        self,
        weight: torch.Tensor,
        params_dtype: torch.dtype = torch.bfloat16,
        group_size: int | None = None,
    ) -> None:
        super().__init__()
        if params_dtype not in HALF_DTYPES:
            raise ValueError(f"params_dtype must be fp16 or bf16, got {params_dtype}")
        size_n, size_k = weight.shape
        codes, scales = marlin_quantize_fp8(weight, group_size)
        num_groups = scales.shape[0]
        group = -1 if num_groups == 1 else size_k // num_groups
        padded_n, padded_k = marlin_padded_nk(size_n, size_k, group)
        # vLLM order: scales to the model dtype, pad, permute for the padded shape, fuse the bias.
        padded_groups = 1 if group == -1 else padded_k // group
        s = _pad2d(scales.to(params_dtype), padded_groups, padded_n)
        s = marlin_permute_scales(s, padded_k, padded_n, group)
        q = pack_fp8_to_int32(_pad2d(codes, padded_k, padded_n))
        self.weight = nn.Parameter(marlin_repack_fp8(q, padded_k, padded_n), requires_grad=False)
        self.weight_scale = nn.Parameter(fp8_fused_exponent_bias_into_scales(s), requires_grad=False)
        self.params_dtype = params_dtype
        self.orig_dtype = params_dtype
        self.group_size = group
        self.input_size_per_partition = size_k
        self.output_size_per_partition = size_n
        self.padded_nk = (padded_n, padded_k)

    def input_rejection(self, dtype: torch.dtype) -> InputRejection | None:
        error = marlin_a_dtype_error(dtype)
        return None if error is None else InputRejection(error, "marlin_gemm")

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        """``apply_fp8_marlin_linear``: 2-D view, pad K, GEMM at the padded shape, slice N."""
        k, n = self.input_size_per_partition, self.output_size_per_partition
        padded_n, padded_k = self.padded_nk
        x2d = x.reshape(-1, x.shape[-1])
        if padded_k != k:
            x2d = torch.nn.functional.pad(x2d, (0, padded_k - k))
        y = marlin_gemm(x2d, self.weight, self.weight_scale, x2d.shape[0], padded_n, padded_k)
        if padded_n != n:
            y = y[..., :n].contiguous()
        return y.reshape(*x.shape[:-1], n), None
