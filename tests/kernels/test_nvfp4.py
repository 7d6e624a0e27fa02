"""NVFP4: block quantizer steps, thresholds, nibble order, dtype assert, layer."""

from __future__ import annotations

import pytest
import torch

from dtype_lint.kernels_ref.formats import FP8, e2m1_decode, unpack_nibbles
from dtype_lint.kernels_ref.nvfp4 import (
    NvFp4Linear,
    nvfp4_dequantize,
    nvfp4_quantize,
    scaled_fp4_quant,
)

# With gs_inv = 1 and a block max of 6, sf = fp8(6 * fp32(1/6)) = 1 and osc = 1, so each value
# is encoded as is: this block walks every threshold of the spec.
BLOCK = [6.0, 0.25, 0.26, 0.75, 0.74, 1.25, 1.26, 1.75, 2.5, 2.6, 3.5, 3.4, 5.0, 5.1, -0.1, -0.0]
CODES = [7, 0, 1, 2, 1, 2, 3, 4, 4, 5, 6, 5, 6, 7, 8, 0]


def test_thresholds_and_nibble_order_on_a_hand_picked_block():
    x = torch.tensor([BLOCK], dtype=torch.float32)
    packed, sf = nvfp4_quantize(x, 1.0)
    assert sf.dtype == FP8 and sf.shape == (1, 1) and sf.float().item() == 1.0
    assert packed.dtype == torch.uint8 and packed.shape == (1, 8)
    expected_bytes = [CODES[2 * i] | (CODES[2 * i + 1] << 4) for i in range(8)]
    assert packed[0].tolist() == expected_bytes
    assert packed[0, 0].item() == 0x07 and packed[0, 1].item() == 0x21


def test_block_scale_rounds_then_values_clamp_to_six():
    # vmax 6.3: 6.3/6 = 1.05 rounds down to sf = 1, so 6.3 * osc = 6.3 is clamped to 6 (code 7)
    x = torch.tensor([[6.3, -6.3] + [0.0] * 14])
    packed, sf = nvfp4_quantize(x, 1.0)
    assert sf.float().item() == 1.0
    codes = unpack_nibbles(packed)[0].tolist()
    assert codes[:2] == [7, 15] and codes[2:] == [0] * 14


def test_zero_block_has_zero_scale_and_no_nan():
    x = torch.zeros(2, 32)
    x[1, 16:] = torch.linspace(-1, 1, 16)
    packed, sf = nvfp4_quantize(x, 3.0)
    assert sf[0].float().tolist() == [0.0, 0.0] and sf[1, 0].float().item() == 0.0
    assert unpack_nibbles(packed)[0].tolist() == [0] * 32
    assert not torch.isnan(nvfp4_dequantize(packed, sf)).any()


def test_global_scale_enters_the_block_scale_and_saturates_at_448():
    x = torch.zeros(1, 32)
    x[0, 0] = 3.0  # block 0 vmax 3
    x[0, 16] = 3.0e4  # block 1 vmax 3e4: 3e4 * 200 / 6 > 448
    packed, sf = nvfp4_quantize(x, 200.0)
    # fp32: 3 * fp32(1/6) rounds to exactly 0.5, so sf = fp8(100): a tie between 96 and 104 -> 96
    assert sf[0, 0].float().item() == 96.0
    assert sf[0, 1].float().item() == 448.0
    codes = unpack_nibbles(packed)[0]
    # 3 * 1/(96/200) = 6.25 -> clamp 6; 3e4 * 1/(448/200) = 13393 -> clamp 6
    assert codes[0].item() == 7 and codes[16].item() == 7


def test_quantization_error_is_bounded():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(8, 64, generator=gen)
    gs_inv = 2688.0 / x.abs().max().item()
    packed, sf = nvfp4_quantize(x, gs_inv)
    deq = nvfp4_dequantize(packed, sf) / gs_inv
    rel = ((deq - x).norm() / x.norm()).item()
    assert 0.03 < rel < 0.2
    # per block: the block scale tracks vmax/6 within fp8 rounding (2^-4 relative)
    vmax = x.reshape(8, 4, 16).abs().amax(-1)
    assert ((sf.float() / gs_inv - vmax / 6).abs() <= vmax / 6 * 2.0**-4 * 1.001).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.uint8, FP8])
def test_scaled_fp4_quant_asserts_16_bit_input(dtype):
    x = torch.zeros(2, 16, dtype=dtype)
    with pytest.raises(AssertionError) as exc:
        scaled_fp4_quant(x, 1.0)
    assert str(exc.value) == f"input.dtype needs to be fp16 or bf16 but got {dtype}."


def test_layer_parameters():
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(32, 64, generator=gen)
    layer = NvFp4Linear(w, torch.bfloat16, input_amax=5.0)
    assert layer.weight.dtype == torch.uint8 and layer.weight.shape == (32, 32)
    assert layer.weight_scale.dtype == FP8 and layer.weight_scale.shape == (32, 4)
    w_gs = w.abs().max() / 2688
    assert layer.weight_global_scale.item() == w_gs.item()
    assert layer.input_global_scale.item() == torch.tensor(5.0 / 2688, dtype=torch.float32).item()
    assert layer.alpha.item() == (layer.input_global_scale * layer.weight_global_scale).item()
    # decoding the stored nibbles (even k low) reproduces W within fp4 error
    vals = e2m1_decode(unpack_nibbles(layer.weight)).reshape(32, 4, 16)
    deq = (vals * layer.weight_scale.float().unsqueeze(-1)).reshape(32, 64) * w_gs
    assert ((deq - w).norm() / w.norm()).item() < 0.2


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layer_forward_within_w4a4_error(dtype):
    gen = torch.Generator().manual_seed(2)
    w = torch.randn(64, 128, generator=gen) / 11
    x = torch.randn(2, 5, 128, generator=gen).to(dtype)
    layer = NvFp4Linear(w, torch.bfloat16, input_amax=x.float().abs().max())
    y, bias = layer(x)
    assert bias is None and y.dtype == dtype and y.shape == (2, 5, 64)
    ref = x.double() @ w.double().t()
    rel = ((y.double() - ref).norm() / ref.norm()).item()
    assert 0.03 < rel < 0.3


def test_layer_forward_rejects_other_dtypes_with_vllms_assert():
    layer = NvFp4Linear(torch.randn(16, 32), torch.bfloat16, input_amax=1.0)
    with pytest.raises(AssertionError) as exc:
        layer(torch.zeros(3, 32))
    assert str(exc.value) == "input.dtype needs to be fp16 or bf16 but got torch.float32."
