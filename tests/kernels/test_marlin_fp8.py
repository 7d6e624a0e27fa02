"""Marlin W8A16 FP8 reference: packing, repack layout, scales, dequant, tile padding, dtype contract."""

from __future__ import annotations

import pytest
import torch

from dtype_lint.kernels_ref.formats import FP8, fp8_from_bytes
from dtype_lint.kernels_ref.marlin_fp8 import (
    MarlinFp8Linear,
    fp8_fused_exponent_bias_into_scales,
    get_scale_perms,
    marlin_dequantize_fp8,
    marlin_fp8_codes,
    marlin_gemm,
    marlin_padded_nk,
    marlin_permute_scales,
    marlin_quantize_fp8,
    marlin_repack_fp8,
    marlin_repack_fp8_loop,
    marlin_unpermute_scales,
    marlin_unrepack_fp8,
    pack_fp8_to_int32,
    place_fp8_bits,
)

K, N = 32, 128


def random_codes(size_k: int, size_n: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (size_k, size_n), generator=gen, dtype=torch.uint8)
    raw[(raw & 0x7F) == 0x7F] = 0x11  # no NaN patterns
    return fp8_from_bytes(raw)


def word_bytes(w: int) -> list[int]:
    w &= 0xFFFFFFFF
    return [(w >> (8 * j)) & 0xFF for j in range(4)]


def test_pack_fp8_to_int32_matches_vllm_view_and_byte_order():
    codes = random_codes(K, N)
    q = pack_fp8_to_int32(codes)
    assert q.dtype == torch.int32 and q.shape == (K // 4, N)
    # vLLM's own implementation (little-endian host): (N,K) contiguous viewed as int32, transposed.
    assert torch.equal(q, codes.t().contiguous().view(torch.int32).t().contiguous())
    raw = codes.view(torch.uint8)
    for i, n in [(0, 0), (3, 5), (7, 127)]:
        assert word_bytes(int(q[i, n])) == [int(raw[4 * i + j, n]) for j in range(4)]
    q_nk = pack_fp8_to_int32(codes.t().contiguous(), size_k_first=False)
    assert torch.equal(q_nk, q.t())


def test_repack_matches_the_literal_kernel_transcription():
    for seed, (size_k, size_n) in enumerate([(16, 64), (32, 128), (48, 64)]):
        q = pack_fp8_to_int32(random_codes(size_k, size_n, seed))
        fast = marlin_repack_fp8(q, size_k, size_n)
        assert fast.shape == (size_k // 16, 4 * size_n) and fast.dtype == torch.int32
        assert torch.equal(fast, marlin_repack_fp8_loop(q, size_k, size_n))


# (k, n) -> (row, col, byte), worked out by hand from gptq_marlin_repack_kernel:
# thread t = 4*(n%8) + (k%8)//2, warp w = (n%64)//16, res2 iff n%16 >= 8,
# vals slot i = k%2 + 2*(k%16 >= 8), byte = pack_idx[i] with pack_idx = {0,2,1,3}.
HAND_POSITIONS = [
    ((0, 0), (0, 0, 0)),
    ((1, 0), (0, 0, 2)),
    ((8, 0), (0, 0, 1)),
    ((9, 0), (0, 0, 3)),
    ((2, 0), (0, 8, 0)),
    ((0, 1), (0, 32, 0)),
    ((0, 8), (0, 1, 0)),
    ((0, 16), (0, 2, 0)),
    ((0, 64), (0, 256, 0)),
    ((16, 0), (1, 0, 0)),
    ((31, 127), (1, 511, 3)),
]


@pytest.mark.parametrize(("kn", "where"), HAND_POSITIONS)
def test_repack_places_a_single_element_where_the_kernel_does(kn, where):
    raw = torch.zeros(K, N, dtype=torch.uint8)
    raw[kn] = 0x5A
    out = marlin_repack_fp8(pack_fp8_to_int32(fp8_from_bytes(raw)), K, N)
    row, col, byte = where
    nonzero = out.nonzero().tolist()
    assert nonzero == [[row, col]]
    assert word_bytes(int(out[row, col]))[byte] == 0x5A


def test_repack_round_trips():
    codes = random_codes(K, N, seed=3)
    q = pack_fp8_to_int32(codes)
    packed = marlin_repack_fp8(q, K, N)
    assert torch.equal(marlin_unrepack_fp8(packed, K, N), q)
    assert torch.equal(marlin_fp8_codes(packed, K, N).view(torch.uint8), codes.view(torch.uint8))
    # a permutation of the bytes: same multiset
    all_bytes = torch.stack([(packed.to(torch.int64) >> (8 * j)) & 0xFF for j in range(4)])
    assert torch.equal(all_bytes.flatten().sort().values, codes.view(torch.uint8).flatten().to(torch.int64).sort().values)


def test_repack_rejects_untiled_shapes():
    with pytest.raises(RuntimeError, match="tile_n_size"):
        marlin_repack_fp8(torch.zeros(4, 32, dtype=torch.int32), 16, 32)


def test_scale_perms_are_vllms():
    scale_perm, scale_perm_single = get_scale_perms()
    assert sorted(scale_perm) == list(range(64))
    assert sorted(scale_perm_single) == list(range(32))
    assert scale_perm[:9] == [0, 8, 16, 24, 32, 40, 48, 56, 1]
    assert scale_perm_single[:10] == [0, 1, 8, 9, 16, 17, 24, 25, 2, 3]


@pytest.mark.parametrize(("groups", "perm_len"), [(1, 32), (4, 64)])
def test_scale_permutation_and_inverse(groups, perm_len):
    s = torch.arange(groups * N, dtype=torch.float32).reshape(groups, N)
    group_size = -1 if groups == 1 else 512 // groups
    p = marlin_permute_scales(s, 512, N, group_size)
    scale_perm, scale_perm_single = get_scale_perms()
    perm = scale_perm_single if groups == 1 else scale_perm
    assert p.shape == (groups, N)
    assert p.reshape(-1)[:perm_len].tolist() == [float(i) for i in perm]
    assert torch.equal(marlin_unpermute_scales(p), s)


@pytest.mark.parametrize(("dtype", "bias"), [(torch.float16, 8), (torch.bfloat16, 120)])
def test_exponent_bias_fusion(dtype, bias):
    s = (torch.rand(1, N, generator=torch.Generator().manual_seed(4)) * 0.01 + 1e-4).to(dtype)
    fused = fp8_fused_exponent_bias_into_scales(s)
    assert fused.dtype == dtype
    assert torch.equal(fused.double(), s.double() * 2.0**bias)


@pytest.mark.parametrize(("dtype", "bias"), [(torch.float16, 8), (torch.bfloat16, 120)])
def test_bit_placement_is_fp8_times_power_of_two_for_every_code(dtype, bias):
    raw = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F], dtype=torch.uint8)
    codes = fp8_from_bytes(raw)
    placed = place_fp8_bits(codes, dtype)
    assert placed.dtype == dtype
    assert torch.equal(placed.double() * 2.0**bias, codes.double())


@pytest.mark.parametrize("group_size", [None, 128])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dequant_equals_codes_times_stored_scale(dtype, group_size):
    size_k, size_n = 256, 128
    w = torch.randn(size_n, size_k, generator=torch.Generator().manual_seed(5)) / 16
    layer = MarlinFp8Linear(w, dtype, group_size)
    codes, scales = marlin_quantize_fp8(w, group_size)
    groups = 1 if group_size is None else size_k // 128
    assert scales.shape == (groups, size_n)
    # Independent path: torch's fp8 decode times the scale in params_dtype, one rounding.
    per_k = scales.to(dtype).float().repeat_interleave(size_k // groups, dim=0)
    expected = (codes.float() * per_k).to(dtype)
    got = marlin_dequantize_fp8(layer.weight, layer.weight_scale, size_k, size_n, dtype)
    assert torch.equal(got, expected)
    # and the quantization itself is within fp8's half-ulp (2^-4 relative) of W
    err = (codes.float() * scales.repeat_interleave(size_k // groups, 0) - w.t()).abs()
    assert (err <= w.t().abs() * 2.0**-4 + 2.0**-9 * per_k).all()


def test_layer_attributes():
    w = torch.randn(128, 256)
    layer = MarlinFp8Linear(w, torch.bfloat16)
    assert layer.weight.dtype == torch.int32 and layer.weight.shape == (256 // 16, 4 * 128)
    assert layer.weight_scale.dtype == torch.bfloat16 and layer.weight_scale.shape == (1, 128)
    assert layer.params_dtype == torch.bfloat16
    assert layer.input_size_per_partition == 256 and layer.output_size_per_partition == 128
    g = MarlinFp8Linear(w, torch.float16, group_size=128)
    assert g.weight_scale.shape == (2, 128) and g.weight_scale.dtype == torch.float16


@pytest.mark.parametrize("group_size", [None, 128])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gemm_matches_fp32_matmul_within_fp8_error(dtype, group_size):
    gen = torch.Generator().manual_seed(6)
    w = torch.randn(128, 256, generator=gen) / 16
    x = torch.randn(2, 3, 256, generator=gen)
    layer = MarlinFp8Linear(w, dtype, group_size)
    y, bias = layer(x.to(dtype))
    assert bias is None and y.dtype == dtype and y.shape == (2, 3, 128)
    ref = x.to(dtype).double() @ w.double().t()
    rel = ((y.double() - ref).norm() / ref.norm()).item()
    assert 1e-3 < rel < 0.05  # fp8 weight error (~2.7% rms); not exact, not broken


def test_gemm_accumulates_in_fp32_against_the_dequantized_weight():
    gen = torch.Generator().manual_seed(7)
    layer = MarlinFp8Linear(torch.randn(64, 128, generator=gen), torch.bfloat16)
    a = torch.randn(5, 128, generator=gen).bfloat16()
    deq = marlin_dequantize_fp8(layer.weight, layer.weight_scale, 128, 64, torch.bfloat16)
    c = marlin_gemm(a, layer.weight, layer.weight_scale, 5, 64, 128)
    ref = (a.double() @ deq.double()).to(torch.bfloat16)
    assert (c.float() - ref.float()).abs().max() <= ref.float().abs().max() * 2.0**-8


@pytest.fixture(scope="module")
def small_layer():
    # N=64, K=128: the (n%64, k%128) tile family, so no padding and the shapes below are exact.
    return MarlinFp8Linear(torch.randn(64, 128, generator=torch.Generator().manual_seed(8)), torch.bfloat16)


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32, torch.uint8, torch.float64])
def test_unsupported_a_dtype_text(small_layer, dtype):
    a = torch.zeros(3, 128, dtype=dtype)
    with pytest.raises(RuntimeError) as exc:
        marlin_gemm(a, small_layer.weight, small_layer.weight_scale, 3, 64, 128)
    assert str(exc.value) == "unsupported `a` scalar_type"


@pytest.mark.parametrize("dtype", [FP8, torch.int8])
def test_8bit_a_needs_a_scales(small_layer, dtype):
    a = torch.zeros(3, 128).to(dtype)
    with pytest.raises(RuntimeError) as exc:
        marlin_gemm(a, small_layer.weight, small_layer.weight_scale, 3, 64, 128)
    assert str(exc.value) == "the a_scales parameter must be passed for 8bit activation."


def test_dtype_is_checked_before_shapes(small_layer):
    with pytest.raises(RuntimeError) as exc:
        marlin_gemm(torch.zeros(3, 7, dtype=torch.int32), small_layer.weight, small_layer.weight_scale, 9, 64, 128)
    assert str(exc.value) == "unsupported `a` scalar_type"


def test_shape_checks(small_layer):
    a = torch.zeros(3, 128, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"Shape mismatch: a.size\(0\) = 3, size_m = 4"):
        marlin_gemm(a, small_layer.weight, small_layer.weight_scale, 4, 64, 128)
    with pytest.raises(RuntimeError, match="size_n = 128, actual_size_n = 64"):
        marlin_gemm(a, small_layer.weight, small_layer.weight_scale, 3, 128, 128)


def test_scale_dtype_is_not_checked_upstream_reads_the_bits_as_a_type(small_layer):
    # marlin.cu has no b_scales dtype check: bf16 scales with an fp16 `a` are read as fp16 bits.
    a = torch.randn(3, 128, generator=torch.Generator().manual_seed(9)).half()
    got = marlin_gemm(a, small_layer.weight, small_layer.weight_scale, 3, 64, 128)
    as_fp16 = small_layer.weight_scale.view(torch.float16)
    want = marlin_gemm(a, small_layer.weight, as_fp16, 3, 64, 128)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    right = marlin_gemm(a.bfloat16(), small_layer.weight, small_layer.weight_scale, 3, 64, 128)
    assert not torch.allclose(got.float(), right.float(), rtol=0.1, atol=1e-3)  # garbage, silently
    with pytest.raises(RuntimeError, match="reference-only check"):
        marlin_gemm(a, small_layer.weight, small_layer.weight_scale.float(), 3, 64, 128)


@pytest.mark.parametrize(
    "n, k, group, want",
    [
        (64, 128, -1, (64, 128)),
        (128, 64, -1, (128, 64)),
        (96, 80, -1, (128, 128)),  # both families give 128 x 128
        (64, 96, -1, (64, 128)),
        (192, 64, -1, (256, 64)),
        (64, 200, 128, (64, 256)),
        (4096, 512, 128, (4096, 512)),
    ],
)
def test_padded_nk_is_vllms_rule(n, k, group, want):
    assert marlin_padded_nk(n, k, group) == want


@pytest.mark.parametrize("n, k, group_size", [(96, 80, None), (64, 200, None), (100, 256, 128)])
def test_padded_layer_computes_the_unpadded_product(n, k, group_size):
    gen = torch.Generator().manual_seed(10)
    w = torch.randn(n, k, generator=gen) / 8
    layer = MarlinFp8Linear(w, torch.bfloat16, group_size)
    padded_n, padded_k = layer.padded_nk
    assert (padded_n, padded_k) != (n, k)
    assert layer.weight.shape == (padded_k // 16, 4 * padded_n)
    x = torch.randn(2, 5, k, generator=gen).bfloat16()
    y, _ = layer(x)
    assert y.shape == (2, 5, n) and y.is_contiguous()
    # The padded region is zero codes with zero scales: the product is the unpadded one.
    codes, scales = marlin_quantize_fp8(w, group_size)
    g = scales.shape[0]
    deq = (codes.float() * scales.to(torch.bfloat16).float().repeat_interleave(k // g, dim=0)).bfloat16()
    want = (x.reshape(-1, k).float() @ deq.float()).bfloat16().reshape(2, 5, n)
    assert (y.float() - want.float()).abs().max() <= want.float().abs().max() * 2.0**-7


def test_layer_called_with_int32_activation_fails_like_the_pre_fix_path(small_layer):
    # 0.27.1: kv_c_normed.to(self.kv_b_proj.weight.dtype) with an int32 Marlin weight
    x = torch.randn(4, 128).to(small_layer.weight.dtype)
    assert x.dtype == torch.int32
    with pytest.raises(RuntimeError) as exc:
        small_layer(x)
    assert str(exc.value) == "unsupported `a` scalar_type"
    rejection = small_layer.input_rejection(torch.int32)
    assert (type(rejection.error), str(rejection.error), rejection.raised_in) == (
        RuntimeError, "unsupported `a` scalar_type", "marlin_gemm")
    assert small_layer.input_rejection(torch.bfloat16) is None
