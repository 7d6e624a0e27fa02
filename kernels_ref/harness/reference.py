"""Dense reference for the context attention and the error metrics of docs/kernels.md.

The reference attends each request's queries to its whole stored context at once, in fp64
(on a GPU too: fp32 would do there, but fp64 keeps TF32 settings and accumulation order out
of the question at a cost of well under a second), with the original fp32 ``W``: no chunking,
no merge, no quantization. Errors are measured only over tokens whose request has context; tokens without
context are checked separately for the exact zeros / -inf the masking must leave.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def reference_context_attention(
    *,
    q: torch.Tensor,
    cache: torch.Tensor,
    block_table: torch.Tensor,
    context_lens: list[int],
    query_start_loc: list[int],
    w: torch.Tensor,
    kv_lora_rank: int,
    qk_nope_head_dim: int,
    v_head_dim: int,
    scale: float,
    k_scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out [T,H,v], lse [H,T])`` of every query against its request's full context.

    ``cache`` is the stored paged cache (any float dtype, read as stored; an fp8 cache's values
    times ``k_scale``, exactly in fp64) and ``w`` the fp32 kv_b_proj weight ``[H*(nope+v), L]``.
    Requests without context get 0 and -inf.
    """
    acc = torch.float64
    num_tokens, num_heads, _ = q.shape
    block_size = cache.shape[1]
    out = torch.zeros(num_tokens, num_heads, v_head_dim, dtype=acc, device=q.device)
    lse = torch.full((num_heads, num_tokens), float("-inf"), dtype=acc, device=q.device)
    w = w.to(acc)
    for r, ctx in enumerate(context_lens):
        if ctx == 0:
            continue
        started, t1 = query_start_loc[r], query_start_loc[r + 1]
        pos = torch.arange(ctx, device=cache.device)
        rows = cache[block_table[r].long()[pos // block_size], pos % block_size].to(acc)
        if cache.dtype == torch.float8_e4m3fn:
            rows = rows * float(torch.tensor(k_scale, dtype=torch.float32))
        latent, k_pe = rows[:, :kv_lora_rank], rows[:, kv_lora_rank:]
        kv = (latent @ w.t()).view(ctx, num_heads, qk_nope_head_dim + v_head_dim)
        k_nope, v = kv.split([qk_nope_head_dim, v_head_dim], dim=-1)
        k = torch.cat((k_nope, k_pe.unsqueeze(1).expand(-1, num_heads, -1)), dim=-1)
        scores = torch.einsum("thd,shd->hts", q[started:t1].to(acc), k) * scale
        lse[:, started:t1] = torch.logsumexp(scores, dim=-1)
        out[started:t1] = torch.einsum("hts,shd->thd", torch.softmax(scores, dim=-1), v)
    return out, lse


@dataclass(frozen=True)
class ErrorMetrics:
    """The metrics of one output against the reference, over tokens with context."""

    rel: float  # ‖o−ref‖F / ‖ref‖F
    rel_per_request: list[float]
    lse: float  # max |Δlse|
    max_abs_over_rms: float  # max|o−ref| / rms(ref); the sanity bound is 12·rel bound
    finite: bool

    def violations(self, rel_bound: float, lse_bound: float) -> list[str]:
        found = []
        if not self.finite:
            found.append("non-finite output or LSE on tokens with context")
        if not self.rel <= rel_bound:
            found.append(f"rel {self.rel:.3e} > bound {rel_bound:.1e}")
        if not self.lse <= lse_bound:
            found.append(f"lse {self.lse:.3e} > bound {lse_bound:.1e}")
        if not self.max_abs_over_rms <= 12 * rel_bound:
            found.append(f"max|o-ref|/rms(ref) {self.max_abs_over_rms:.3e} > 12·bound {12 * rel_bound:.2e}")
        return found


def error_metrics(
    out: torch.Tensor,
    lse: torch.Tensor,
    ref_out: torch.Tensor,
    ref_lse: torch.Tensor,
    context_lens: list[int],
    query_start_loc: list[int],
) -> ErrorMetrics:
    """Compare a run's ``(out [T,H,v], lse [H,T])`` with the reference."""
    spans = [(query_start_loc[r], query_start_loc[r + 1]) for r, c in enumerate(context_lens) if c > 0]
    idx = torch.cat([torch.arange(a, b) for a, b in spans]).to(out.device)
    o, ref = out[idx].to(ref_out.dtype), ref_out[idx]
    low, lref = lse[:, idx].to(ref_lse.dtype), ref_lse[:, idx]
    finite = bool(torch.isfinite(o).all() and torch.isfinite(low).all())

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))

    per_request = [rel(out[a:b].to(ref_out.dtype), ref_out[a:b]) for a, b in spans]
    rms = float(ref.pow(2).mean().sqrt())
    return ErrorMetrics(
        rel=rel(o, ref),
        rel_per_request=per_request,
        lse=float((low - lref).abs().max()),
        max_abs_over_rms=float((o - ref).abs().max()) / rms,
        finite=finite,
    )


def bit_identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bits (so -inf, -0.0 and NaN payloads must match too)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    int_view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.contiguous().view(int_view), b.contiguous().view(int_view))


def empty_context_violations(
    out: torch.Tensor, lse: torch.Tensor, context_lens: list[int], query_start_loc: list[int]
) -> list[str]:
    """Tokens of requests with no context must come out exactly 0 with LSE exactly -inf."""
    found = []
    for r, ctx in enumerate(context_lens):
        if ctx:
            continue
        a, b = query_start_loc[r], query_start_loc[r + 1]
        if not bool((out[a:b] == 0).all()):
            found.append(f"request {r} has no context but its output is not all 0")
        if not bool((lse[:, a:b] == float("-inf")).all()):
            found.append(f"request {r} has no context but its LSE is not all -inf")
    return found
