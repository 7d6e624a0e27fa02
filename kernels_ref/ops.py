"""One entry point per kernel op: the CUDA version for CUDA tensors, else the PyTorch reference.

Every op takes ``backend=``:

* ``"auto"`` (default): CUDA when every tensor argument is on a CUDA device, the CUDA path is
  available (:func:`build.cuda_available`) and the op supports the case (e.g. merge needs
  ``head_dim % 8 == 0``, as vLLM's CUDA kernel does; vLLM falls back to Triton, we to PyTorch);
  otherwise the PyTorch reference.
* ``"torch"``: the PyTorch reference, on whatever device the tensors are.
* ``"cuda"``: the CUDA version or an error saying why it cannot run (:class:`CudaUnavailable`
  for CPU tensors or a missing CUDA stack, ``RuntimeError`` for an unsupported case).

Every op goes through :func:`_dispatch`: resolve the backend, run the reference's own argument
checks (the functions the reference modules export, so ``unsupported `a` scalar_type`` reads the
same from either implementation), decide, then call either the reference function or the CUDA
launch. The PyTorch side of an op is always the reference module's function, the one the layers'
``forward`` calls, so there is one GEMM path (:func:`formats.matmul_fp32`) for both.

:func:`installed` routes the reference modules' call sites (the layers' GEMMs and quantizers, the
attention functions the verify fixture and the upstream harness call) through these ops for the
duration of a ``with`` block, so the verification harness can run the whole MLA prefill on the
CUDA kernels.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator, TypeVar

import torch

from . import attention as _attn
from . import fp8_linear as _fp8
from . import linear_basic as _lin
from . import marlin_fp8 as _marlin
from . import nvfp4 as _nvfp4
from .build import CudaUnavailable, cuda_available, dtype_code, launch
from .formats import FP8, FP8_MIN_SCALE, HALF_DTYPES, f32

BACKENDS = ("auto", "torch", "cuda")
T = TypeVar("T")


class _Reference:
    """The reference functions as imported, before :func:`installed` patches any module global
    (the fallbacks below must never call a patched name, or they would recurse)."""

    marlin_gemm = staticmethod(_marlin.marlin_gemm)
    marlin_dequantize_fp8 = staticmethod(_marlin.marlin_dequantize_fp8)
    pack_fp8_to_int32 = staticmethod(_marlin.pack_fp8_to_int32)
    marlin_repack_fp8 = staticmethod(_marlin.marlin_repack_fp8)
    fp8_quant_per_token = staticmethod(_fp8.fp8_quant_per_token)
    fp8_scaled_mm = staticmethod(_fp8.fp8_scaled_mm)
    scaled_fp4_quant = staticmethod(_nvfp4.scaled_fp4_quant)
    nvfp4_mm = staticmethod(_nvfp4.nvfp4_mm)
    unquantized_linear = staticmethod(_lin.unquantized_linear)
    awq_dequantize = staticmethod(_lin.awq_dequantize)
    awq_gemm = staticmethod(_lin.awq_gemm)
    mla_prefill_attention = staticmethod(_attn.mla_prefill_attention)
    mask_empty_context = staticmethod(_attn.mask_empty_context)
    merge_attn_states = staticmethod(_attn.merge_attn_states)


REF = _Reference
_KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16, FP8)
_state = threading.local()


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


def default_backend() -> str:
    """The backend ``"auto"`` resolves through first (set by :func:`use_backend`)."""
    return getattr(_state, "backend", "auto")


@contextlib.contextmanager
def use_backend(backend: str) -> Iterator[None]:
    """Make ``backend="auto"`` calls in this thread behave as ``backend`` inside the block."""
    _check_backend(backend)
    old = default_backend()
    _state.backend = backend
    try:
        yield
    finally:
        _state.backend = old


def _use_cuda(op: str, backend: str, tensors, unsupported: str | None = None) -> bool:
    """Decide the implementation; raise for an impossible ``backend="cuda"``.

    ``unsupported`` is a reason the CUDA version cannot take this case (None: it can); it is
    only consulted after the reference's own checks have passed.
    """
    _check_backend(backend)
    if backend == "auto":
        backend = default_backend()
    if backend == "torch":
        return False
    on_cuda = bool(tensors) and all(t.is_cuda for t in tensors)
    if backend == "auto":
        return on_cuda and unsupported is None and cuda_available()
    if not on_cuda:
        devices = sorted({str(t.device) for t in tensors})
        raise CudaUnavailable(f"{op}: backend='cuda' needs CUDA tensors, got device(s) {devices}")
    if len({t.device for t in tensors}) != 1:
        raise RuntimeError(f"{op}: all tensors must be on one device")
    if unsupported is not None:
        raise RuntimeError(unsupported)
    if not cuda_available():
        raise CudaUnavailable(f"{op}: backend='cuda' but CuPy/NVRTC is not available")
    return True


def _dispatch(
    op: str,
    backend: str,
    tensors,
    reference: Callable[[], T],
    cuda: Callable[[], T],
    *,
    check: Callable[[], object] | None = None,
    unsupported: Callable[[], str | None] | None = None,
) -> T:
    """The one backend decision every op makes.

    ``"torch"`` (given, or resolved from ``"auto"`` by :func:`use_backend`) calls ``reference``
    at once. Otherwise ``check`` (the reference's own argument checks) runs first, so a bad
    argument fails the same way whichever implementation would have run; then ``unsupported``
    names a case the CUDA version cannot take, and :func:`_use_cuda` picks ``cuda`` or
    ``reference``. ``tensors`` are the arguments whose devices decide.
    """
    _check_backend(backend)
    resolved = default_backend() if backend == "auto" else backend
    if resolved == "torch":
        return reference()
    if check is not None:
        check()
    reason = unsupported() if unsupported is not None else None
    tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
    if not _use_cuda(op, resolved, tensors, reason):
        return reference()
    return cuda()


def _launch_1d(name: str, total: int, args, device, threads: int = 256) -> None:
    launch(name, ((total + threads - 1) // threads,), (threads,), args, device=device)


def _gemm_grid(m: int, n: int) -> tuple[int, int]:
    return ((n + 127) // 128, (m + 127) // 128)


def _raw(t: torch.Tensor) -> torch.Tensor:
    """fp8 tensors as their uint8 bytes (same storage); others unchanged."""
    return t.view(torch.uint8) if t.dtype == FP8 else t


# ============================================================================= Marlin FP8


check_marlin_gemm = _marlin.check_marlin_gemm


def _marlin_inv_bias(dtype: torch.dtype) -> float:
    return 2.0 ** -_marlin.EXPONENT_BIAS[dtype]


def marlin_gemm(a, b_q_weight, b_scales, size_m, size_n, size_k, *, backend: str = "auto"):
    """``ops.marlin_gemm`` for fp8 weights (see :func:`marlin_fp8.marlin_gemm`)."""

    def cuda():
        c = torch.empty((size_m, size_n), dtype=a.dtype, device=a.device)
        if size_m == 0:
            return c
        bq, sc = b_q_weight.contiguous(), b_scales.contiguous()
        launch(
            "marlin_gemm_fp8", _gemm_grid(size_m, size_n), (256,),
            (a, a.stride(0), a.stride(1), bq, sc, c, size_m, size_n, size_k, sc.size(0),
             dtype_code(a.dtype), _marlin_inv_bias(a.dtype)),
            device=a.device,
        )
        return c

    return _dispatch(
        "marlin_gemm", backend, [a, b_q_weight, b_scales],
        lambda: REF.marlin_gemm(a, b_q_weight, b_scales, size_m, size_n, size_k), cuda,
        check=lambda: check_marlin_gemm(a, b_q_weight, b_scales, size_m, size_n, size_k),
    )


def marlin_dequantize_fp8(b_q_weight, b_scales, size_k, size_n, dtype, *, backend: str = "auto"):
    """``deq[K,N]`` (see :func:`marlin_fp8.marlin_dequantize_fp8`); bit-exact across backends."""

    def cuda():
        if tuple(b_q_weight.shape) != (size_k // _marlin.TILE_K, 4 * size_n):
            raise ValueError(
                f"expected b_q_weight of shape {(size_k // _marlin.TILE_K, 4 * size_n)}, "
                f"got {tuple(b_q_weight.shape)}"
            )
        out = torch.empty((size_k, size_n), dtype=dtype, device=b_q_weight.device)
        sc = b_scales.contiguous()
        _launch_1d(
            "marlin_dequant_fp8", size_k * size_n,
            (b_q_weight.contiguous(), sc, out, size_k, size_n, sc.size(0), dtype_code(dtype), _marlin_inv_bias(dtype)),
            b_q_weight.device,
        )
        return out

    return _dispatch(
        "marlin_dequantize_fp8", backend, [b_q_weight, b_scales],
        lambda: REF.marlin_dequantize_fp8(b_q_weight, b_scales, size_k, size_n, dtype), cuda,
        unsupported=lambda: None if dtype in HALF_DTYPES and b_scales.dtype == dtype
        else "dtype must be fp16/bf16 and match b_scales",
    )


def pack_fp8_to_int32(fp8_tensor, size_k_first: bool = True, *, backend: str = "auto"):
    """GPTQ-style packing (see :func:`marlin_fp8.pack_fp8_to_int32`); CUDA for ``size_k_first``."""

    def cuda():
        k, n = fp8_tensor.shape
        out = torch.empty((k // 4, n), dtype=torch.int32, device=fp8_tensor.device)
        _launch_1d("marlin_pack_fp8_to_int32", (k // 4) * n, (_raw(fp8_tensor.contiguous()), out, k, n), out.device)
        return out

    return _dispatch(
        "pack_fp8_to_int32", backend, [fp8_tensor],
        lambda: REF.pack_fp8_to_int32(fp8_tensor, size_k_first), cuda,
        check=lambda: _marlin.check_pack_fp8_to_int32(fp8_tensor, size_k_first),
        unsupported=lambda: None if size_k_first else "pack_fp8_to_int32: the CUDA version packs size_k_first only",
    )


def marlin_repack_fp8(q, size_k: int, size_n: int, *, backend: str = "auto"):
    """``gptq_marlin_repack`` for 8-bit weights (see :func:`marlin_fp8.marlin_repack_fp8`)."""

    def cuda():
        out = torch.empty((size_k // 16, 4 * size_n), dtype=torch.int32, device=q.device)
        _launch_1d("marlin_repack_fp8", out.numel(), (q.contiguous(), out, size_k, size_n), q.device)
        return out

    return _dispatch(
        "marlin_repack_fp8", backend, [q], lambda: REF.marlin_repack_fp8(q, size_k, size_n), cuda,
        check=lambda: _marlin.check_repack_shape(q, size_k, size_n),
    )


# ============================================================================= native FP8


def fp8_quant_per_token(x, *, backend: str = "auto"):
    """Dynamic per-token fp8 quantization (see :func:`fp8_linear.fp8_quant_per_token`)."""

    def unsupported():
        if x.dtype not in _KERNEL_DTYPES:
            return f"fp8_quant_per_token: no CUDA version for {x.dtype}"
        if x.dim() == 0 or x.shape[-1] == 0:
            return "fp8_quant_per_token: the CUDA version needs a non-empty last dimension"
        return None

    def cuda():
        k = x.shape[-1]
        x2 = x.reshape(-1, k)
        m = x2.shape[0]
        xq = torch.empty((m, k), dtype=torch.uint8, device=x.device)
        scale = torch.empty((m, 1), dtype=torch.float32, device=x.device)
        launch(
            "fp8_quant_per_token", (m,), (256,),
            (_raw(x2), x2.stride(0), x2.stride(1), dtype_code(x.dtype), xq, scale, m, k, FP8_MIN_SCALE),
            device=x.device,
        )
        return xq.view(FP8).reshape(x.shape), scale.reshape(*x.shape[:-1], 1)

    return _dispatch("fp8_quant_per_token", backend, [x], lambda: REF.fp8_quant_per_token(x), cuda, unsupported=unsupported)


check_fp8_scaled_mm = _fp8.check_fp8_scaled_mm


def fp8_scaled_mm(a, b, scale_a, scale_b, out_dtype, *, backend: str = "auto"):
    """``cutlass_scaled_mm`` (see :func:`fp8_linear.fp8_scaled_mm`)."""

    def cuda():
        m, k = a.shape
        n = b.shape[1]
        sa = scale_a.float().reshape(-1).contiguous()
        sb = scale_b.float().reshape(-1).contiguous()
        out = torch.empty((m, n), dtype=out_dtype, device=a.device)
        launch(
            "fp8_scaled_mm", _gemm_grid(m, n), (256,),
            (_raw(a), a.stride(0), a.stride(1), _raw(b), b.stride(0), b.stride(1),
             sa, 1 if sa.numel() > 1 else 0, sb, 1 if sb.numel() > 1 else 0,
             out, dtype_code(out_dtype), m, n, k),
            device=a.device,
        )
        return out

    return _dispatch(
        "fp8_scaled_mm", backend, [a, b, scale_a, scale_b],
        lambda: REF.fp8_scaled_mm(a, b, scale_a, scale_b, out_dtype), cuda,
        check=lambda: check_fp8_scaled_mm(a, b, scale_a, scale_b),
        unsupported=lambda: None if out_dtype in _KERNEL_DTYPES else f"fp8_scaled_mm: no CUDA version for out_dtype {out_dtype}",
    )


# ============================================================================= NVFP4


def _check_scaled_fp4_quant(x) -> None:
    error = _nvfp4.scaled_fp4_quant_input_error(x.dtype)
    if error is not None:
        raise error
    if x.shape[-1] % _nvfp4.NVFP4_BLOCK:
        raise ValueError(f"K = {x.shape[-1]} is not divisible by {_nvfp4.NVFP4_BLOCK}")


def scaled_fp4_quant(x, global_scale_inv, *, backend: str = "auto"):
    """``ops.scaled_fp4_quant`` (see :func:`nvfp4.scaled_fp4_quant`): packed e2m1 and fp8 scales."""

    def cuda():
        k = x.shape[-1]
        x2 = x.reshape(-1, k)
        if x2.stride(1) != 1:
            x2 = x2.contiguous()
        m = x2.shape[0]
        gs = f32(global_scale_inv, x.device).reshape(1).contiguous()
        packed = torch.empty((m, k // 2), dtype=torch.uint8, device=x.device)
        sf = torch.empty((m, k // 16), dtype=torch.uint8, device=x.device)
        _launch_1d(
            "nvfp4_quant", m * (k // 16),
            (x2, x2.stride(0), dtype_code(x.dtype), gs, packed, sf, m, k, float(f32(1.0 / _nvfp4.E2M1_MAX).item())),
            x.device,
        )
        lead = x.shape[:-1]
        return packed.reshape(*lead, k // 2), sf.view(FP8).reshape(*lead, k // 16)

    return _dispatch(
        "scaled_fp4_quant", backend, [x, global_scale_inv],
        lambda: REF.scaled_fp4_quant(x, global_scale_inv), cuda, check=lambda: _check_scaled_fp4_quant(x),
    )


def nvfp4_mm(aq, a_sf, wq, w_sf, alpha, out_dtype, *, backend: str = "auto"):
    """``cutlass_scaled_fp4_mm`` on linear block scales (see :func:`nvfp4.nvfp4_mm`)."""

    def check():
        if aq.dim() != 2 or wq.dim() != 2 or aq.shape[1] != wq.shape[1]:
            raise RuntimeError(f"nvfp4_mm shape mismatch: a {tuple(aq.shape)} and w {tuple(wq.shape)}")

    def unsupported():
        if aq.dtype != torch.uint8 or wq.dtype != torch.uint8 or a_sf.dtype != FP8 or w_sf.dtype != FP8:
            return "nvfp4_mm: packed operands must be uint8 and block scales fp8"
        if out_dtype not in _KERNEL_DTYPES:
            return f"nvfp4_mm: no CUDA version for out_dtype {out_dtype}"
        return None

    def cuda():
        m, n, k = aq.shape[0], wq.shape[0], aq.shape[1] * 2
        if tuple(a_sf.shape) != (m, k // 16) or tuple(w_sf.shape) != (n, k // 16):
            raise RuntimeError(f"nvfp4_mm: block scales must be [rows, K/16], got {tuple(a_sf.shape)} and {tuple(w_sf.shape)}")
        al = f32(alpha, aq.device).reshape(1).contiguous()
        out = torch.empty((m, n), dtype=out_dtype, device=aq.device)
        launch(
            "nvfp4_mm", _gemm_grid(m, n), (256,),
            (aq.contiguous(), _raw(a_sf.contiguous()), wq.contiguous(), _raw(w_sf.contiguous()), al,
             out, dtype_code(out_dtype), m, n, k),
            device=aq.device,
        )
        return out

    return _dispatch(
        "nvfp4_mm", backend, [aq, a_sf, wq, w_sf, alpha],
        lambda: REF.nvfp4_mm(aq, a_sf, wq, w_sf, alpha, out_dtype), cuda, check=check, unsupported=unsupported,
    )


# ============================================================================= unquantized and AWQ


def unquantized_linear(x, weight, *, backend: str = "auto"):
    """``x @ W.T`` in fp32, output in ``weight.dtype`` (see :func:`linear_basic.unquantized_linear`)."""

    def check():
        error = _lin.unquantized_input_error(x.dtype, weight.dtype)
        if error is not None:
            raise error

    def cuda():
        n, k = weight.shape
        x2 = x.reshape(-1, x.shape[-1])
        m = x2.shape[0]
        out = torch.empty((m, n), dtype=weight.dtype, device=x.device)
        launch(
            "unquantized_linear", _gemm_grid(m, n), (256,),
            (_raw(x2), x2.stride(0), x2.stride(1), _raw(weight), weight.stride(0), weight.stride(1),
             dtype_code(x.dtype), out, dtype_code(weight.dtype), m, n, k),
            device=x.device,
        )
        return out.reshape(*x.shape[:-1], n)

    return _dispatch(
        "unquantized_linear", backend, [x, weight], lambda: REF.unquantized_linear(x, weight), cuda,
        check=check,
        unsupported=lambda: None if x.dtype in _KERNEL_DTYPES and weight.dim() == 2
        else f"unquantized_linear: no CUDA version for {x.dtype}",
    )


def awq_dequantize(qweight, qzeros, scales, group_size, *, backend: str = "auto"):
    """``round_act((q - z)·s)`` ``[K,N]`` (see :func:`linear_basic.awq_dequantize`); bit-exact."""

    def cuda():
        size_k, size_n = qweight.shape[0], qweight.shape[1] * 8
        out = torch.empty((size_k, size_n), dtype=scales.dtype, device=scales.device)
        _launch_1d(
            "awq_dequant", size_k * size_n,
            (qweight.contiguous(), qzeros.contiguous(), scales.contiguous(), out, size_k, size_n, group_size,
             dtype_code(scales.dtype)),
            scales.device,
        )
        return out

    return _dispatch(
        "awq_dequantize", backend, [qweight, qzeros, scales],
        lambda: REF.awq_dequantize(qweight, qzeros, scales, group_size), cuda,
        check=lambda: _lin.check_awq(qweight, qzeros, scales, group_size),
        unsupported=lambda: None if scales.dtype in (torch.float32, *HALF_DTYPES) else f"awq: no CUDA version for {scales.dtype}",
    )


def awq_gemm(x, qweight, qzeros, scales, group_size, *, backend: str = "auto"):
    """``x @ deq`` in fp32, output in ``scales.dtype`` (see :func:`linear_basic.awq_gemm`)."""

    def check():
        size_k, _ = _lin.check_awq(qweight, qzeros, scales, group_size)
        if x.shape[-1] != size_k:
            raise RuntimeError(f"awq_gemm: x has K = {x.shape[-1]}, qweight K = {size_k}")

    def unsupported():
        if scales.dtype not in (torch.float32, *HALF_DTYPES) or x.dtype != scales.dtype:
            return f"awq_gemm: the CUDA version needs x and scales of one float dtype, got {x.dtype}, {scales.dtype}"
        return None

    def cuda():
        size_k, size_n = qweight.shape[0], qweight.shape[1] * 8
        x2 = x.reshape(-1, x.shape[-1])
        m = x2.shape[0]
        out = torch.empty((m, size_n), dtype=scales.dtype, device=x.device)
        launch(
            "awq_gemm", _gemm_grid(m, size_n), (256,),
            (x2, x2.stride(0), x2.stride(1), qweight.contiguous(), qzeros.contiguous(), scales.contiguous(),
             out, m, size_n, size_k, group_size, dtype_code(scales.dtype)),
            device=x.device,
        )
        return out.reshape(*x.shape[:-1], size_n)

    return _dispatch(
        "awq_gemm", backend, [x, qweight, qzeros, scales],
        lambda: REF.awq_gemm(x, qweight, qzeros, scales, group_size), cuda, check=check, unsupported=unsupported,
    )


# ============================================================================= attention

ATTN_MAX_HEAD_DIM = 256
ATTN_ROWS_PER_TILE = 32


check_mla_prefill_attention = _attn.check_mla_prefill_attention


def mla_prefill_attention(
    q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, out_dtype, empty: str = "fa2",
    *, backend: str = "auto",
):
    """Varlen prefill attention with LSE (see :func:`attention.mla_prefill_attention`)."""

    def unsupported():
        if q.shape[2] > ATTN_MAX_HEAD_DIM or v.shape[2] > ATTN_MAX_HEAD_DIM:
            return f"mla_prefill_attention: the CUDA version supports head dims up to {ATTN_MAX_HEAD_DIM}"
        if out_dtype not in _KERNEL_DTYPES:
            return f"mla_prefill_attention: no CUDA version for out_dtype {out_dtype}"
        if q.shape[1] > 65535:
            return "mla_prefill_attention: more than 65535 heads"
        return None

    def cuda():
        cq, ck = check_mla_prefill_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, empty)
        dev = q.device
        qc, kc, vc = (t if t.stride(2) == 1 else t.contiguous() for t in (q, k, v))
        num_tokens, num_heads, d_qk = q.shape
        d_v = v.shape[2]
        out = torch.empty((num_tokens, num_heads, d_v), dtype=out_dtype, device=dev)
        lse = torch.empty((num_heads, num_tokens), dtype=torch.float32, device=dev)
        tiles = [x for b in range(len(cq) - 1) for q0 in range(cq[b], cq[b + 1], ATTN_ROWS_PER_TILE) for x in (b, q0)]
        if not tiles:
            return out, lse
        launch(
            "mla_prefill_attention_fwd", (len(tiles) // 2, num_heads), (256,),
            (_raw(qc), qc.stride(0), qc.stride(1), _raw(kc), kc.stride(0), kc.stride(1),
             _raw(vc), vc.stride(0), vc.stride(1), dtype_code(q.dtype), out, dtype_code(out_dtype),
             lse, torch.tensor(tiles, dtype=torch.int32, device=dev), torch.tensor(cq, dtype=torch.int64, device=dev),
             torch.tensor(ck, dtype=torch.int64, device=dev), num_tokens, num_heads, d_qk, d_v, float(softmax_scale),
             1 if causal else 0, 1 if empty == "fa2" else 0),
            device=dev,
        )
        return out, lse

    return _dispatch(
        "mla_prefill_attention", backend, [q, k, v],
        lambda: REF.mla_prefill_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, out_dtype, empty),
        cuda,
        check=lambda: check_mla_prefill_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, empty),
        unsupported=unsupported,
    )


def _offsets_tensor(offsets, device) -> torch.Tensor:
    if isinstance(offsets, torch.Tensor):
        return offsets.to(device=device, dtype=torch.int64).contiguous()
    return torch.tensor([int(v) for v in offsets], dtype=torch.int64, device=device)


def mask_empty_context(lse, output, query_start_loc, context_start_loc, *, backend: str = "auto") -> None:
    """In place (see :func:`attention.mask_empty_context`)."""

    def unsupported():
        if lse.dtype != torch.float32 or lse.dim() != 2 or output.dim() != 3 or output.dtype not in _KERNEL_DTYPES:
            return "mask_empty_context: the CUDA version needs an fp32 [H,T] lse and a 3-D output"
        return None

    def cuda():
        dev = output.device
        n_q = len(_attn.check_mask_empty_context(query_start_loc, context_start_loc)[0])
        launch(
            "mask_empty_context", (max(output.shape[0], lse.shape[1]),), (128,),
            (lse, lse.stride(0), lse.stride(1), lse.shape[0], lse.shape[1],
             _raw(output), output.stride(0), output.stride(1), output.stride(2), dtype_code(output.dtype),
             output.shape[0], output.shape[1], output.shape[2],
             _offsets_tensor(query_start_loc, dev), _offsets_tensor(context_start_loc, dev), n_q - 1),
            device=dev,
        )

    return _dispatch(
        "mask_empty_context", backend, [lse, output],
        lambda: REF.mask_empty_context(lse, output, query_start_loc, context_start_loc), cuda,
        check=lambda: _attn.check_mask_empty_context(query_start_loc, context_start_loc),
        unsupported=unsupported,
    )


def merge_unsupported(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse) -> str | None:
    """Why the CUDA merge cannot take these tensors, or None. The head-dim rule is vLLM's
    ``merge_attn_states.cu`` (16-byte packs: 8 halves or 4 floats)."""
    if output.dim() != 3 or prefix_output.dim() != 3 or suffix_output.dim() != 3:
        return "merge_attn_states: the CUDA version needs [T,H,D] outputs"
    if output.dtype not in (torch.float32, *HALF_DTYPES):
        return f"merge_attn_states: no CUDA version for {output.dtype}"
    pack = 4 if output.dtype == torch.float32 else 8
    if output.shape[2] % pack:
        return f"headsize must be multiple of pack_size:{pack}"
    if any(t.dtype != torch.float32 for t in (prefix_lse, suffix_lse)) or (
        output_lse is not None and output_lse.dtype != torch.float32
    ):
        return "merge_attn_states: the CUDA version needs fp32 LSEs"
    if any(t.stride(2) != 1 for t in (output, prefix_output, suffix_output)):
        return "merge_attn_states: the CUDA version needs a unit stride along head_dim"
    if prefix_output.dtype not in _KERNEL_DTYPES or suffix_output.dtype not in _KERNEL_DTYPES:
        return "merge_attn_states: unsupported input dtype"
    return None


def merge_attn_states(
    output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse=None,
    prefill_tokens_with_context=None, output_scale=None, *, backend: str = "auto",
) -> None:
    """In place (see :func:`attention.merge_attn_states`)."""

    def cuda():
        num_tokens, num_heads, head_dim = output.shape
        ptwc = num_tokens if prefill_tokens_with_context is None else int(prefill_tokens_with_context)
        ptwc = max(0, min(ptwc, num_tokens))
        ol = output_lse
        launch(
            "merge_attn_states", (num_tokens, num_heads), (128,),
            (output, output.stride(0), output.stride(1), dtype_code(output.dtype),
             _raw(prefix_output), prefix_output.stride(0), prefix_output.stride(1), dtype_code(prefix_output.dtype),
             _raw(suffix_output), suffix_output.stride(0), suffix_output.stride(1), dtype_code(suffix_output.dtype),
             prefix_lse, prefix_lse.stride(0), prefix_lse.stride(1),
             suffix_lse, suffix_lse.stride(0), suffix_lse.stride(1),
             ol, ol.stride(0) if ol is not None else 0, ol.stride(1) if ol is not None else 0,
             head_dim, ptwc),
            device=output.device,
        )

    return _dispatch(
        "merge_attn_states", backend, [output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse],
        lambda: REF.merge_attn_states(
            output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse, prefill_tokens_with_context, output_scale
        ),
        cuda,
        check=lambda: _attn.check_merge_attn_states(output_scale),
        unsupported=lambda: merge_unsupported(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse),
    )


# ============================================================================= routing the harness


@contextlib.contextmanager
def installed(backend: str = "cuda") -> Iterator[None]:
    """Route the reference modules' call sites through these ops with ``backend``.

    Patches, for the duration of the block, the module globals the layers and the harness call:
    the GEMMs and quantizers (``marlin_fp8.marlin_gemm``, ``fp8_linear.fp8_quant_per_token`` and
    ``fp8_scaled_mm``, ``nvfp4.scaled_fp4_quant`` and ``nvfp4_mm``, ``linear_basic.unquantized_linear``
    and ``awq_gemm``) and the attention functions (``attention.*``, bound by a freshly imported
    verify fixture and looked up at call time by the upstream harness). Everything is restored on
    exit. Not thread-safe: for the GPU check's single thread.
    """
    _check_backend(backend)

    def bind(fn):
        def wrapper(*a, **kw):
            kw.setdefault("backend", backend)
            return fn(*a, **kw)

        wrapper.__name__ = fn.__name__
        wrapper.__doc__ = fn.__doc__
        # mypy does not model attributes set on a function object; Python allows any.
        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
        return wrapper

    patches = {
        (_marlin, "marlin_gemm"): bind(marlin_gemm),
        (_fp8, "fp8_quant_per_token"): bind(fp8_quant_per_token),
        (_fp8, "fp8_scaled_mm"): bind(fp8_scaled_mm),
        (_nvfp4, "scaled_fp4_quant"): bind(scaled_fp4_quant),
        (_nvfp4, "nvfp4_mm"): bind(nvfp4_mm),
        (_lin, "unquantized_linear"): bind(unquantized_linear),
        (_lin, "awq_gemm"): bind(awq_gemm),
        (_attn, "mla_prefill_attention"): bind(mla_prefill_attention),
        (_attn, "mask_empty_context"): bind(mask_empty_context),
        (_attn, "merge_attn_states"): bind(merge_attn_states),
    }
    saved = {key: getattr(*key) for key in patches}
    try:
        for (owner, name), function_node in patches.items():
            setattr(owner, name, function_node)
        yield
    finally:
        for (owner, name), function_node in saved.items():
            setattr(owner, name, function_node)
