"""Unquantized and AWQ-like linears: dtype contracts, AWQ packing and quantization."""

from __future__ import annotations

import pytest
import torch

from dtype_lint.kernels_ref.linear_basic import (
    AwqLikeLinear,
    UnquantizedLinear,
    awq_dequantize,
    awq_pack,
    awq_quantize,
    awq_unpack,
)

# ----------------------------------------------------------------------------- unquantized


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_unquantized_forward(dtype):
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(24, 40, generator=gen)
    layer = UnquantizedLinear(w, dtype)
    assert layer.weight.dtype == dtype and layer.weight.shape == (24, 40)
    assert layer.params_dtype == dtype
    x = torch.randn(2, 3, 40, generator=gen).to(dtype)
    y, bias = layer(x)
    assert bias is None and y.dtype == dtype and y.shape == (2, 3, 24)
    ref = (x.double() @ w.to(dtype).double().t()).to(dtype)
    assert (y.float() - ref.float()).abs().max() <= ref.float().abs().max() * 2.0**-7


@pytest.mark.parametrize("x_dtype", [torch.float32, torch.float16, torch.int32])
def test_unquantized_dtype_mismatch_raises(x_dtype):
    layer = UnquantizedLinear(torch.randn(8, 16), torch.bfloat16)
    with pytest.raises(RuntimeError):
        layer(torch.zeros(2, 16, dtype=x_dtype))


# ----------------------------------------------------------------------------- AWQ packing


def test_awq_pack_order():
    values = torch.arange(8).reshape(1, 8)  # column c holds value c
    word = awq_pack(values)
    assert word.dtype == torch.int32 and word.shape == (1, 1)
    # nibble i holds column [0,2,4,6,1,3,5,7][i]
    assert word.item() == 0x75316420
    high = awq_pack(torch.tensor([[15, 0, 0, 0, 0, 0, 0, 9]]))
    assert high.item() == 0x9000000F - 2**32  # nibble 0 <- col 0, nibble 7 <- col 7


def test_awq_pack_matches_a_loop_transcription_and_round_trips():
    gen = torch.Generator().manual_seed(1)
    q = torch.randint(0, 16, (4, 24), generator=gen)
    packed = awq_pack(q)
    order = [0, 2, 4, 6, 1, 3, 5, 7]
    for r in range(4):
        for j in range(3):
            word = 0
            for i in range(8):
                word |= int(q[r, 8 * j + order[i]]) << (4 * i)
            assert int(packed[r, j]) & 0xFFFFFFFF == word
    assert torch.equal(awq_unpack(packed), q)


# ----------------------------------------------------------------------------- AWQ quantization


def test_awq_quantization_is_asymmetric_per_group_and_column():
    k, n = 128, 8
    w = torch.zeros(n, k)
    w[0, :64] = torch.linspace(-1.0, 2.0, 64)  # group 0, column 0: mn -1, mx 2
    w[1, :64] = torch.linspace(0.5, 3.0, 64)  # all positive: mn clamps to 0 -> z = 0
    w[2, :64] = torch.linspace(-3.0, -0.5, 64)  # all negative: mx clamps to 0 -> z = 15
    # column 3 and group 1 of every column stay zero
    q, z, scales = awq_quantize(w, torch.bfloat16, 64)
    assert q.shape == (k, n) and z.shape == (2, n) and scales.shape == (2, n)
    assert scales.dtype == torch.bfloat16
    s0 = torch.tensor(3.0 / 15).bfloat16()
    assert scales[0, 0] == s0 and scales[0, 1] == torch.tensor(3.0 / 15).bfloat16()
    assert z[0, 0].item() == round(1.0 / s0.item()) == 5
    assert z[0, 1].item() == 0 and z[0, 2].item() == 15
    assert q[0, 0].item() == 0 and q[63, 0].item() == 15
    assert scales[0, 3].item() == 0.0 and z[0, 3].item() == 0 and (q[:, 3] == 0).all()
    assert (q[64:] == 0).all() and scales[1].abs().sum().item() == 0.0
    deq = ((q - z.repeat_interleave(64, 0)).float() * scales.float().repeat_interleave(64, 0))
    step = scales.float().repeat_interleave(64, 0)
    assert ((deq - w.t()).abs() <= step / 2 + 1e-6).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_awq_layer_has_no_weight_and_the_right_parameters(dtype):
    layer = AwqLikeLinear(torch.randn(32, 128), dtype)
    assert not hasattr(layer, "weight")
    with pytest.raises(AttributeError, match="'weight'"):
        layer.weight  # noqa: B018  (the 0.27.1 access)
    params = dict(layer.named_parameters())
    assert set(params) == {"qweight", "qzeros", "scales"}
    assert layer.qweight.dtype == torch.int32 and layer.qweight.shape == (128, 4)
    assert layer.qzeros.dtype == torch.int32 and layer.qzeros.shape == (2, 4)
    assert layer.scales.dtype == dtype and layer.scales.shape == (2, 32)
    assert layer.params_dtype == dtype and layer.group_size == 64


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_awq_forward_within_int4_error(dtype):
    gen = torch.Generator().manual_seed(2)
    w = torch.randn(64, 256, generator=gen) / 16
    layer = AwqLikeLinear(w, dtype)
    x = torch.randn(3, 256, generator=gen).to(dtype)
    y, bias = layer(x)
    assert bias is None and y.dtype == dtype and y.shape == (3, 64)
    ref = x.double() @ w.double().t()
    rel = ((y.double() - ref).norm() / ref.norm()).item()
    assert 0.02 < rel < 0.2
    deq = awq_dequantize(layer.qweight, layer.qzeros, layer.scales, 64)
    assert deq.dtype == dtype and deq.shape == (256, 64)
    exact = (x.double() @ deq.double()).to(dtype)
    assert (y.float() - exact.float()).abs().max() <= exact.float().abs().max() * 2.0**-7


@pytest.mark.parametrize("x_dtype", [torch.float32, torch.float16, torch.int32])
def test_awq_input_dtype_must_equal_params_dtype(x_dtype):
    layer = AwqLikeLinear(torch.randn(16, 64), torch.bfloat16)
    with pytest.raises(RuntimeError):
        layer(torch.zeros(2, 64, dtype=x_dtype))
