"""MLA prefill attention, empty-context masking and state merging.

``mla_prefill_attention`` mirrors ``run_prefill_context_chunk`` of
``v1/attention/backends/mla/prefill/flash_attn.py`` (varlen, LSE ``[H,T]``) and, for fp8
q/k/v with a model-dtype output, ``trtllm_ragged.py``. ``mask_empty_context`` and
``merge_attn_states`` mirror ``v1/attention/ops/triton_merge_attn_states.py``.

Everything is computed in fp32 from the stored inputs; the per-request loop runs on the
inputs' device.
"""

from __future__ import annotations

import torch

from .formats import FP8, matmul_fp32

ATTN_DTYPES = (torch.float16, torch.bfloat16, FP8)
EMPTY_MODES = ("fa2", "fa3")


def _offsets(cu: torch.Tensor | list[int]) -> list[int]:
    return [int(v) for v in (cu.tolist() if isinstance(cu, torch.Tensor) else cu)]


def check_mla_prefill_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, empty) -> tuple[list[int], list[int]]:
    """The argument checks of :func:`mla_prefill_attention`, in order; returns the request offsets.
    The CUDA wrapper (`ops.py`) runs the same function so both fail identically."""
    if empty not in EMPTY_MODES:
        raise ValueError(f"empty must be one of {EMPTY_MODES}, got {empty!r}")
    if q.dtype not in ATTN_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise RuntimeError(
            "q, k and v must share one dtype in (torch.float16, torch.bfloat16, "
            f"torch.float8_e4m3fn), got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise ValueError("q, k and v must be [tokens, heads, head_dim]")
    if k.shape[:2] != v.shape[:2] or q.shape[1] != k.shape[1] or q.shape[2] != k.shape[2]:
        raise ValueError(
            f"shape mismatch: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    cq, ck = _offsets(cu_seqlens_q), _offsets(cu_seqlens_k)
    if len(cq) != len(ck) or cq[0] != 0 or ck[0] != 0:
        raise ValueError("cu_seqlens_q and cu_seqlens_k must both start at 0 and have one length")
    if cq[-1] != q.shape[0] or ck[-1] != k.shape[0]:
        raise ValueError(
            f"cu_seqlens end at ({cq[-1]}, {ck[-1]}) but q has {q.shape[0]} and k {k.shape[0]} rows"
        )
    return cq, ck


def mla_prefill_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor | list[int],
    cu_seqlens_k: torch.Tensor | list[int],
    softmax_scale: float,
    causal: bool,
    out_dtype: torch.dtype,
    empty: str = "fa2",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Varlen attention ``q[T,H,Dqk]``, ``k[S,H,Dqk]``, ``v[S,H,Dv]`` to ``(out[T,H,Dv], lse[H,T])``.

    * q, k, v share one dtype: fp16, bf16 or fp8 e4m3fn (unit descales: fp8 values are used as is).
    * Per request, in fp32: ``s = (q·k) · softmax_scale``; ``m = max s``; ``p = exp(s - m)``;
      ``out = (p @ v) / Σp`` rounded once to ``out_dtype``; ``lse = m + ln Σp`` (natural log).
    * ``causal``: bottom-right aligned, query i of a request (Tq queries, Sk keys) sees keys
      ``j ≤ i + Sk - Tq``.
    * A request with zero keys (or, under ``causal``, a query row that sees no key) is "empty":
      ``empty="fa2"`` writes NaN rows and LSE +inf (deliberate poison, so that masking must
      happen before merging); ``empty="fa3"`` writes 0 and LSE -inf.
    """
    cq, ck = check_mla_prefill_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, empty)

    num_tokens, num_heads, _ = q.shape
    head_dim_v = v.shape[2]
    empty_out = float("nan") if empty == "fa2" else 0.0
    empty_lse = float("inf") if empty == "fa2" else float("-inf")
    out = torch.empty((num_tokens, num_heads, head_dim_v), dtype=out_dtype, device=q.device)
    lse = torch.empty((num_heads, num_tokens), dtype=torch.float32, device=q.device)

    for b in range(len(cq) - 1):
        qs, qe, ks, ke = cq[b], cq[b + 1], ck[b], ck[b + 1]
        tq, sk = qe - qs, ke - ks
        if tq == 0:
            continue
        if sk == 0:
            out[qs:qe] = empty_out
            lse[:, qs:qe] = empty_lse
            continue
        qf = q[qs:qe].float().transpose(0, 1)  # [H,Tq,D]
        kf = k[ks:ke].float().transpose(0, 1)  # [H,Sk,D]
        vf = v[ks:ke].float().transpose(0, 1)  # [H,Sk,Dv]
        scores = matmul_fp32(qf, kf.transpose(1, 2)) * softmax_scale  # [H,Tq,Sk] fp32
        if causal:
            i = torch.arange(tq, device=q.device).unsqueeze(1)
            j = torch.arange(sk, device=q.device).unsqueeze(0)
            scores = scores.masked_fill(j > i + (sk - tq), float("-inf"))
        m = scores.amax(dim=-1, keepdim=True)  # [H,Tq,1]
        row_empty = m == float("-inf")
        m_safe = torch.where(row_empty, torch.zeros_like(m), m)
        p = torch.exp(scores - m_safe)
        denom = p.sum(dim=-1, keepdim=True)
        o = matmul_fp32(p, vf) / denom
        row_lse = (m_safe + torch.log(denom)).squeeze(-1)  # [H,Tq]
        o = torch.where(row_empty, torch.full_like(o, empty_out), o)
        row_lse = torch.where(row_empty.squeeze(-1), torch.full_like(row_lse, empty_lse), row_lse)
        out[qs:qe] = o.transpose(0, 1).to(out_dtype)
        lse[:, qs:qe] = row_lse
    return out, lse


def check_mask_empty_context(query_start_loc, context_start_loc) -> tuple[list[int], list[int]]:
    """The argument check of :func:`mask_empty_context` (shared with the CUDA wrapper)."""
    qsl, csl = _offsets(query_start_loc), _offsets(context_start_loc)
    if len(qsl) != len(csl):
        raise ValueError("query_start_loc and context_start_loc must have one length")
    return qsl, csl


def check_merge_attn_states(output_scale) -> None:
    """The argument check of :func:`merge_attn_states` (shared with the CUDA wrapper)."""
    if output_scale is not None:
        raise NotImplementedError("merge_attn_states: output_scale (fp8 output) is not supported")


def mask_empty_context(
    lse: torch.Tensor,
    output: torch.Tensor,
    query_start_loc: torch.Tensor | list[int],
    context_start_loc: torch.Tensor | list[int],
) -> None:
    """In place: for each request whose context span is empty
    (``context_start_loc[r] == context_start_loc[r+1]``), set ``lse[:, tokens] = -inf`` and
    ``output[tokens] = 0`` for its query tokens ``query_start_loc[r]:query_start_loc[r+1]``.

    ``lse`` is ``[H,T]``, ``output`` ``[T,H,...]``. Emptiness comes from the offsets, never from
    the LSE value, as in vLLM.
    """
    qsl, csl = check_mask_empty_context(query_start_loc, context_start_loc)
    for r in range(len(qsl) - 1):
        if csl[r] == csl[r + 1]:
            lse[:, qsl[r] : qsl[r + 1]] = float("-inf")
            output[qsl[r] : qsl[r + 1]] = 0


def merge_attn_states(
    output: torch.Tensor,
    prefix_output: torch.Tensor,
    prefix_lse: torch.Tensor,
    suffix_output: torch.Tensor,
    suffix_lse: torch.Tensor,
    output_lse: torch.Tensor | None = None,
    prefill_tokens_with_context: int | None = None,
    output_scale: torch.Tensor | None = None,
) -> None:
    """In place, ``merge_attn_states_kernel``: outputs ``[T,H,D]``, LSEs ``[H,T]``.

    * Tokens ``t >= prefill_tokens_with_context`` copy the suffix output and LSE unchanged.
    * Other tokens, in fp32: map ``+inf`` LSEs to ``-inf`` (FA2's empty marker),
      ``m = max(p, s)``, ``ep = exp(p - m)``, ``es = exp(s - m)``, ``Σ = ep + es``,
      ``out = p_out · (ep/Σ) + s_out · (es/Σ)``, ``lse = ln Σ + m``; if ``m == -inf`` the
      output is 0 and the LSE -inf. ``out`` is rounded once to ``output.dtype``.

    ``output_scale`` (fp8 output) is not implemented and raises ``NotImplementedError``.
    The CUDA version additionally requires ``head_dim % 8 == 0`` (``merge_attn_states.cu``).
    """
    check_merge_attn_states(output_scale)
    num_tokens = output.shape[0]
    ptwc = num_tokens if prefill_tokens_with_context is None else int(prefill_tokens_with_context)
    ptwc = max(0, min(ptwc, num_tokens))

    if ptwc < num_tokens:
        output[ptwc:] = suffix_output[ptwc:].to(output.dtype)
        if output_lse is not None:
            output_lse[:, ptwc:] = suffix_lse[:, ptwc:].to(output_lse.dtype)
    if ptwc == 0:
        return

    inf = float("inf")
    p_lse = prefix_lse[:, :ptwc].float()
    s_lse = suffix_lse[:, :ptwc].float()
    p_lse = torch.where(p_lse == inf, torch.full_like(p_lse, -inf), p_lse)
    s_lse = torch.where(s_lse == inf, torch.full_like(s_lse, -inf), s_lse)
    max_lse = torch.maximum(p_lse, s_lse)
    both_empty = max_lse == -inf
    p_se = torch.exp(p_lse - max_lse)
    s_se = torch.exp(s_lse - max_lse)
    out_se = p_se + s_se
    if output_lse is not None:
        merged_lse = torch.log(out_se) + max_lse
        merged_lse = torch.where(both_empty, torch.full_like(merged_lse, -inf), merged_lse)
        output_lse[:, :ptwc] = merged_lse.to(output_lse.dtype)
    p_scale = (p_se / out_se).t().unsqueeze(-1)  # [ptwc,H,1]
    s_scale = (s_se / out_se).t().unsqueeze(-1)
    merged = prefix_output[:ptwc].float() * p_scale + suffix_output[:ptwc].float() * s_scale
    merged = torch.where(both_empty.t().unsqueeze(-1), torch.zeros_like(merged), merged)
    output[:ptwc] = merged.to(output.dtype)
