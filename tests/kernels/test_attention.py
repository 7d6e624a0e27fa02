"""MLA prefill attention, empty-context masking and merging vs naive fp64 math."""

from __future__ import annotations

import math

import pytest
import torch

from dtype_lint.kernels_ref.attention import (
    mask_empty_context,
    merge_attn_states,
    mla_prefill_attention,
)
from dtype_lint.kernels_ref.formats import FP8

H, DQK, DV = 3, 24, 16
SCALE = DQK**-0.5
INF = float("inf")


def naive_attention(q, k, v, cu_q, cu_k, scale, causal):
    """Per request, per head, per query: an fp64 softmax over the visible keys.

    Returns (out [T,H,Dv] fp64, lse [H,T] fp64); rows without keys are NaN / -inf.
    """
    qd, kd, vd = q.double(), k.double(), v.double()
    t = q.shape[0]
    out = torch.full((t, q.shape[1], v.shape[2]), math.nan, dtype=torch.float64)
    lse = torch.full((q.shape[1], t), -INF, dtype=torch.float64)
    for b in range(len(cu_q) - 1):
        tq, sk = cu_q[b + 1] - cu_q[b], cu_k[b + 1] - cu_k[b]
        for i in range(tq):
            visible = range(sk) if not causal else range(min(sk, i + sk - tq + 1))
            keys = [cu_k[b] + j for j in visible]
            if not keys:
                continue
            row = cu_q[b] + i
            for h in range(q.shape[1]):
                s = torch.stack([qd[row, h] @ kd[j, h] for j in keys]) * scale
                lse[h, row] = torch.logsumexp(s, 0)
                p = torch.softmax(s, 0)
                out[row, h] = (p.unsqueeze(1) * vd[keys, h]).sum(0)
    return out, lse


def make_qkv(lens_q, lens_k, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(lens_q), H, DQK, generator=gen)
    k = torch.randn(sum(lens_k), H, DQK, generator=gen)
    v = torch.randn(sum(lens_k), H, DV, generator=gen)
    cu_q = [0] + torch.tensor(lens_q).cumsum(0).tolist()
    cu_k = [0] + torch.tensor(lens_k).cumsum(0).tolist()
    return q.to(dtype), k.to(dtype), v.to(dtype), cu_q, cu_k


TOL = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7, torch.float32: 1e-6}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    ("in_dtype", "out_dtype"),
    [
        (torch.float16, torch.float16),
        (torch.bfloat16, torch.bfloat16),
        (FP8, torch.bfloat16),
        (torch.bfloat16, torch.float32),
    ],
)
def test_attention_matches_naive_fp64(in_dtype, out_dtype, causal):
    lens_q, lens_k = [3, 5, 1], [7, 5, 4]  # Tq < Sk, Tq == Sk
    q, k, v, cu_q, cu_k = make_qkv(lens_q, lens_k, in_dtype)
    out, lse = mla_prefill_attention(
        q, k, v, torch.tensor(cu_q, dtype=torch.int32), torch.tensor(cu_k, dtype=torch.int32),
        SCALE, causal, out_dtype,
    )
    ref_out, ref_lse = naive_attention(q, k, v, cu_q, cu_k, SCALE, causal)
    assert out.dtype == out_dtype and out.shape == (9, H, DV)
    assert lse.dtype == torch.float32 and lse.shape == (H, 9)
    assert torch.allclose(lse.double(), ref_lse, rtol=1e-5, atol=1e-5)
    err = (out.double() - ref_out).abs()
    assert (err <= TOL[out_dtype] * ref_out.abs() + 1e-5).all()


def test_causal_is_bottom_right_aligned():
    # one request, 2 queries over 4 keys: query 0 sees keys 0..2, query 1 sees all 4
    q, k, v, cu_q, cu_k = make_qkv([2], [4], torch.float16, seed=1)
    v = torch.zeros_like(v)
    v[3] = 1.0  # only the last key carries a value
    out, _ = mla_prefill_attention(q, k, v, cu_q, cu_k, SCALE, True, torch.float32)
    assert out[0].abs().max().item() == 0.0
    assert out[1].min().item() > 0.0


def test_causal_with_more_queries_than_keys_leaves_unseeing_rows_empty():
    q, k, v, cu_q, cu_k = make_qkv([3], [2], torch.bfloat16, seed=2)
    out, lse = mla_prefill_attention(q, k, v, cu_q, cu_k, SCALE, True, torch.bfloat16, empty="fa3")
    assert out[0].abs().max().item() == 0.0 and (lse[:, 0] == -INF).all()
    ref_out, ref_lse = naive_attention(q, k, v, cu_q, cu_k, SCALE, True)
    assert torch.allclose(lse[:, 1:].double(), ref_lse[:, 1:], atol=1e-5)
    assert torch.allclose(out[1:].double(), ref_out[1:], rtol=2.0**-7, atol=1e-5)


def test_natural_log_lse_on_a_hand_case():
    # two keys with scores 0 and ln 3 (scale 1): lse = ln(1 + 3) = ln 4, out = (v0 + 3 v1) / 4
    q = torch.zeros(1, 1, 2, dtype=torch.float32)
    q[0, 0, 0] = 1.0
    k = torch.zeros(2, 1, 2, dtype=torch.float32)
    k[1, 0, 0] = math.log(3.0)
    v = torch.tensor([[[4.0, 0.0]], [[0.0, 8.0]]])
    out, lse = mla_prefill_attention(q.half(), k.half(), v.half(), [0, 1], [0, 2], 1.0, False, torch.float32)
    ln3_half = torch.tensor(math.log(3.0)).half().double().item()
    assert lse.item() == pytest.approx(math.log(1 + math.exp(ln3_half)), abs=1e-6)
    w1 = math.exp(ln3_half) / (1 + math.exp(ln3_half))
    assert out[0, 0].tolist() == pytest.approx([4.0 * (1 - w1), 8.0 * w1], abs=1e-5)


@pytest.fixture()
def with_empty_request():
    # request 1 has queries but no keys in this chunk
    return make_qkv([2, 3, 2], [5, 0, 4], torch.bfloat16, seed=3)


def test_empty_request_fa2_poisons_and_fa3_zeroes(with_empty_request):
    q, k, v, cu_q, cu_k = with_empty_request
    out2, lse2 = mla_prefill_attention(q, k, v, cu_q, cu_k, SCALE, False, torch.bfloat16)
    out3, lse3 = mla_prefill_attention(q, k, v, cu_q, cu_k, SCALE, False, torch.bfloat16, empty="fa3")
    rows = slice(2, 5)
    assert torch.isnan(out2[rows]).all() and (lse2[:, rows] == INF).all()
    assert (out3[rows] == 0).all() and (lse3[:, rows] == -INF).all()
    others = [0, 1, 5, 6]
    assert torch.equal(out2[others], out3[others]) and torch.equal(lse2[:, others], lse3[:, others])
    assert not torch.isnan(out2[others]).any()


def test_mask_empty_context_neutralizes_only_empty_requests(with_empty_request):
    q, k, v, cu_q, cu_k = with_empty_request
    out, lse = mla_prefill_attention(q, k, v, cu_q, cu_k, SCALE, False, torch.bfloat16)
    before_out, before_lse = out.clone(), lse.clone()
    assert mask_empty_context(lse, out, torch.tensor(cu_q), torch.tensor(cu_k)) is None
    rows = slice(2, 5)
    assert (out[rows] == 0).all() and not torch.signbit(out[rows]).any()
    assert (lse[:, rows] == -INF).all()
    others = [0, 1, 5, 6]
    assert torch.equal(out[others], before_out[others])
    assert torch.equal(lse[:, others], before_lse[:, others])


def test_attention_dtype_contract():
    q, k, v, cu_q, cu_k = make_qkv([2], [3], torch.float32)
    with pytest.raises(RuntimeError):
        mla_prefill_attention(q, k, v, cu_q, cu_k, SCALE, False, torch.float32)
    with pytest.raises(RuntimeError):
        mla_prefill_attention(q.half(), k.bfloat16(), v.half(), cu_q, cu_k, SCALE, False, torch.half)
    with pytest.raises(ValueError):
        mla_prefill_attention(q.half(), k.half(), v.half(), cu_q, cu_k, SCALE, False, torch.half, empty="x")


# ----------------------------------------------------------------------------- merge


def split_keys(lens_q, ctx_lens, new_lens, dtype, seed):
    """Per request: ctx keys (prefix, non-causal) then new keys (suffix, causal, = the queries)."""
    gen = torch.Generator().manual_seed(seed)
    t = sum(lens_q)
    q = torch.randn(t, H, DQK, generator=gen).to(dtype)
    kc = torch.randn(sum(ctx_lens), H, DQK, generator=gen).to(dtype)
    vc = torch.randn(sum(ctx_lens), H, DV, generator=gen).to(dtype)
    kn = torch.randn(sum(new_lens), H, DQK, generator=gen).to(dtype)
    vn = torch.randn(sum(new_lens), H, DV, generator=gen).to(dtype)
    return q, kc, vc, kn, vn


def cum(lens):
    return [0] + torch.tensor(lens).cumsum(0).tolist()


def test_merge_equals_one_shot_attention_over_concatenated_keys():
    lens_q, ctx = [3, 4, 2], [6, 5, 3]
    q, kc, vc, kn, vn = split_keys(lens_q, ctx, lens_q, torch.bfloat16, seed=4)
    cq, cc = cum(lens_q), cum(ctx)
    p_out, p_lse = mla_prefill_attention(q, kc, vc, cq, cc, SCALE, False, torch.float32)
    s_out, s_lse = mla_prefill_attention(q, kn, vn, cq, cq, SCALE, True, torch.float32)
    out = torch.empty_like(p_out)
    out_lse = torch.empty_like(p_lse)
    merge_attn_states(out, p_out, p_lse, s_out, s_lse, output_lse=out_lse)
    # one shot: each request's keys = its context followed by its new tokens, causal bottom-right
    k_all, v_all, lens_k = [], [], []
    for b in range(3):
        k_all += [kc[cc[b]:cc[b + 1]], kn[cq[b]:cq[b + 1]]]
        v_all += [vc[cc[b]:cc[b + 1]], vn[cq[b]:cq[b + 1]]]
        lens_k.append(ctx[b] + lens_q[b])
    ref_out, ref_lse = naive_attention(q, torch.cat(k_all), torch.cat(v_all), cq, cum(lens_k), SCALE, True)
    assert torch.allclose(out_lse.double(), ref_lse, rtol=1e-5, atol=1e-5)
    assert torch.allclose(out.double(), ref_out, rtol=1e-5, atol=1e-5)
    # and in bf16 the merge rounds once
    out16 = torch.empty(out.shape, dtype=torch.bfloat16)
    merge_attn_states(out16, p_out.bfloat16(), p_lse, s_out.bfloat16(), s_lse)
    assert ((out16.double() - ref_out).abs() <= 2.0**-6 * ref_out.abs() + 1e-2).all()


def test_merge_copies_the_suffix_from_prefill_tokens_with_context_on():
    t, ptwc = 6, 4
    gen = torch.Generator().manual_seed(5)
    p_out = torch.full((t, H, DV), math.nan)  # garbage past ptwc must never be read
    p_out[:ptwc] = torch.randn(ptwc, H, DV, generator=gen)
    p_lse = torch.full((H, t), math.nan)
    p_lse[:, :ptwc] = torch.randn(H, ptwc, generator=gen)
    s_out = torch.randn(t, H, DV, generator=gen).bfloat16()
    s_lse = torch.randn(H, t, generator=gen)
    s_lse[0, 5] = INF  # copied as is, no +inf mapping in the copy path
    out = torch.zeros(t, H, DV, dtype=torch.bfloat16)
    out_lse = torch.zeros(H, t)
    merge_attn_states(out, p_out.bfloat16(), p_lse, s_out, s_lse, out_lse, prefill_tokens_with_context=ptwc)
    assert torch.equal(out[ptwc:], s_out[ptwc:])
    assert torch.equal(out_lse[:, ptwc:], s_lse[:, ptwc:])
    assert not torch.isnan(out[:ptwc]).any()
    ref_lse = torch.logaddexp(p_lse[:, :ptwc].double(), s_lse[:, :ptwc].double())
    assert torch.allclose(out_lse[:, :ptwc].double(), ref_lse, atol=1e-6)


def test_merge_maps_fa2_plus_inf_to_minus_inf():
    gen = torch.Generator().manual_seed(6)
    p_out = torch.zeros(2, H, DV)  # what mask_empty_context leaves
    p_lse = torch.full((H, 2), INF)  # FA2's empty marker
    s_out = torch.randn(2, H, DV, generator=gen)
    s_lse = torch.randn(H, 2, generator=gen)
    out, out_lse = torch.empty_like(s_out), torch.empty_like(s_lse)
    merge_attn_states(out, p_out, p_lse, s_out, s_lse, out_lse)
    assert torch.equal(out, s_out) and torch.equal(out_lse, s_lse)


def test_merge_without_masking_lets_fa2_nan_through():
    # negative control: unmasked FA2 poison (NaN rows) survives the merge
    s_out = torch.randn(2, H, DV)
    out = torch.empty_like(s_out)
    merge_attn_states(out, torch.full_like(s_out, math.nan), torch.full((H, 2), INF), s_out, torch.zeros(H, 2))
    assert torch.isnan(out).all()


@pytest.mark.parametrize("marker", [-INF, INF])
def test_merge_both_empty_gives_zero_and_minus_inf(marker):
    out = torch.full((3, H, DV), 7.0)
    out_lse = torch.zeros(H, 3)
    empty_lse = torch.full((H, 3), marker)
    zeros = torch.zeros(3, H, DV)
    merge_attn_states(out, zeros, empty_lse, zeros, empty_lse.clone(), out_lse)
    assert (out == 0).all() and not torch.isnan(out).any()
    assert (out_lse == -INF).all()


def test_merge_output_scale_is_not_implemented():
    x = torch.zeros(1, H, DV)
    lse = torch.zeros(H, 1)
    with pytest.raises(NotImplementedError):
        merge_attn_states(x, x, lse, x, lse, output_scale=torch.ones(1))
