"""Native FP8 W8A8 linears: per-token quantizer, scaled mm, block-128 format, layer dtype contract."""

from __future__ import annotations

import pytest
import torch

from dtype_lint.kernels_ref.formats import FP8, FP8_MAX
from dtype_lint.kernels_ref.fp8_linear import Fp8Linear, fp8_quant_per_token, fp8_scaled_mm

MIN_SCALE = torch.tensor(1 / (448 * 512), dtype=torch.float32).item()


def test_per_token_scale_is_row_amax_over_448_with_a_floor():
    x = torch.tensor(
        [
            [896.0, -3.0, 1.0, 0.0],  # amax 896 -> scale 2
            [0.0, 0.0, 0.0, 0.0],  # zero row -> floor
            [1e-6, -2e-6, 0.0, 0.0],  # tiny row -> floor
            [-7.0, 1.0, 2.0, 3.0],
        ],
        dtype=torch.float32,
    ).bfloat16()
    xq, s = fp8_quant_per_token(x)
    assert xq.dtype == FP8 and s.dtype == torch.float32 and s.shape == (4, 1)
    assert s[0].item() == 2.0
    assert s[1].item() == MIN_SCALE and s[2].item() == MIN_SCALE
    assert s[3].item() == torch.tensor(7.0).div(448).item()
    assert xq[0].float().tolist() == [448.0, -1.5, 0.5, 0.0]
    assert xq[1].float().abs().sum().item() == 0.0
    # amax maps onto +-448 exactly, and nothing exceeds it
    assert xq[3, 0].float().item() == -448.0
    assert xq.float().abs().max().item() <= FP8_MAX


def test_per_token_quant_rounds_to_nearest_even():
    # scale 1 (amax 448): values are quantized directly on the e4m3 grid
    x = torch.tensor([[448.0, 1 + 1 / 16, 1 + 3 / 16, 17.0, 19.0, -19.0]], dtype=torch.float16)
    xq, s = fp8_quant_per_token(x)
    assert s.item() == 1.0
    assert xq.float().tolist() == [[448.0, 1.0, 1.25, 16.0, 20.0, -20.0]]


def test_per_token_quant_error_is_within_half_an_fp8_ulp():
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(0)).bfloat16()
    xq, s = fp8_quant_per_token(x)
    err = (xq.float() * s - x.float()).abs()
    assert (err <= x.float().abs() * 2.0**-4 + s * 2.0**-10).all()


def test_scaled_mm_applies_both_scales():
    gen = torch.Generator().manual_seed(1)
    a = (torch.randn(5, 32, generator=gen) * 20).to(FP8)
    b = (torch.randn(32, 7, generator=gen) * 20).to(FP8)
    sa = torch.rand(5, 1, generator=gen) + 0.5
    sb = torch.rand(7, generator=gen) + 0.5
    y = fp8_scaled_mm(a, b, sa, sb, torch.float32)
    ref = (a.double() @ b.double()) * sa.double() * sb.double().unsqueeze(0)
    assert torch.allclose(y.double(), ref, rtol=1e-5, atol=1e-3)
    y1 = fp8_scaled_mm(a, b, torch.tensor([2.0]), torch.tensor([0.5]), torch.bfloat16)
    assert y1.dtype == torch.bfloat16
    assert torch.equal(y1, (a.double() @ b.double()).to(torch.bfloat16))
    with pytest.raises(RuntimeError):
        fp8_scaled_mm(a.float(), b, sa, sb, torch.float32)


@pytest.mark.parametrize("per_channel", [True, False])
def test_layer_weight_layout_and_scales(per_channel):
    w = torch.randn(48, 32, generator=torch.Generator().manual_seed(2))
    layer = Fp8Linear(w, torch.bfloat16, per_channel=per_channel)
    assert layer.weight.dtype == FP8 and layer.weight.shape == (32, 48)
    assert layer.weight.t().is_contiguous() and not layer.weight.is_contiguous()  # the .t() view
    assert layer.weight_scale.dtype == torch.float32
    if per_channel:
        expected = w.abs().amax(dim=1) / 448
        assert layer.weight_scale.shape == (48,)
    else:
        expected = w.abs().amax().reshape(1) / 448
        assert layer.weight_scale.shape == (1,)
    assert torch.equal(layer.weight_scale, expected)
    deq = layer.weight.float() * layer.weight_scale.reshape(1, -1)
    assert ((deq - w.t()).abs() <= w.t().abs() * 2.0**-4 + layer.weight_scale * 2.0**-9).all()
    assert layer.params_dtype == torch.bfloat16
    assert layer.input_size_per_partition == 32 and layer.output_size_per_partition == 48


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_forward_16bit_input_matches_fp32_matmul_within_w8a8_error(dtype):
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(64, 128, generator=gen) / 11
    x = torch.randn(3, 4, 128, generator=gen)
    layer = Fp8Linear(w, dtype)
    y, bias = layer(x.to(dtype))
    assert bias is None and y.dtype == dtype and y.shape == (3, 4, 64)
    ref = x.to(dtype).double() @ w.double().t()
    rel = ((y.double() - ref).norm() / ref.norm()).item()
    assert 5e-3 < rel < 0.08


def test_forward_fp8_input_uses_scale_one():
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(64, 128, generator=gen) / 11
    layer = Fp8Linear(w, torch.bfloat16)
    xq = torch.randn(6, 128, generator=gen).to(FP8)
    y, _ = layer(xq)
    assert y.dtype == torch.bfloat16
    expected = (xq.double() @ layer.weight.double()) * layer.weight_scale.double()
    assert torch.allclose(y.double(), expected, rtol=2.0**-7, atol=1e-6)
    # not re-quantized per token: a dynamically quantized copy of the same values differs
    y_dyn, _ = layer(xq.float().bfloat16())
    assert not torch.equal(y, y_dyn)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float64, torch.uint8])
def test_forward_other_dtypes_raise(dtype):
    layer = Fp8Linear(torch.randn(16, 32), torch.bfloat16)
    with pytest.raises(RuntimeError):
        layer(torch.zeros(2, 32, dtype=dtype))


# ----------------------------------------------------------------------------- block-128


def test_token_group_quantizer_scales_each_1x128_group():
    from dtype_lint.kernels_ref.fp8_linear import fp8_quant_per_token_group

    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(3)).bfloat16()
    x[1, 128:] = 0
    xq, s = fp8_quant_per_token_group(x)
    assert xq.dtype == FP8 and s.shape == (3, 2)
    amax = x.float().reshape(3, 2, 128).abs().amax(-1)
    assert torch.equal(s[0], amax[0] * torch.tensor(1 / 448, dtype=torch.float32))
    assert s[1, 1].item() == pytest.approx(1e-10 / 448)  # the eps floor on an all-zero group
    assert (xq.float().reshape(3, 2, 128).abs().amax(-1)[amax > 0] >= 440).all()


def test_block_layer_weights_scales_and_forward():
    from dtype_lint.kernels_ref.fp8_linear import Fp8BlockLinear

    gen = torch.Generator().manual_seed(4)
    w = torch.randn(200, 256, generator=gen) / 16  # N=200: a partial last block of rows
    layer = Fp8BlockLinear(w, torch.bfloat16)
    assert layer.weight.dtype == FP8 and layer.weight.shape == (200, 256)
    assert layer.weight_scale_inv.shape == (2, 2) and layer.weight_block_size == [128, 128]
    block = w[128:, 128:].abs().amax() / 448
    assert layer.weight_scale_inv[1, 1].item() == pytest.approx(block.item(), rel=1e-6)
    x = torch.randn(2, 9, 256, generator=gen).bfloat16()
    y, _ = layer(x)
    assert y.shape == (2, 9, 200) and y.dtype == torch.bfloat16
    ref = x.double() @ w.double().t()
    rel = ((y.double() - ref).norm() / ref.norm()).item()
    assert 5e-3 < rel < 0.06
    yq, _ = layer(x.to(FP8))  # an fp8 input is taken with unit group scales
    assert torch.isfinite(yq.float()).all()
    assert layer.input_rejection(torch.int32) is not None and layer.input_rejection(FP8) is None
