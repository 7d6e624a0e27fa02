"""W8A8-INT8 reference: per-token int8 activations, per-channel int8 weights, dtype contract."""

from __future__ import annotations

import pytest
import torch

from dtype_lint.kernels_ref.int8_linear import Int8Linear, int8_quant_per_token


def test_per_token_int8_quantizer():
    x = torch.tensor([[254.0, -127.0, 1.0, 0.4], [0.0, 0.0, 0.0, 0.0]]).bfloat16()
    q, s = int8_quant_per_token(x)
    assert q.dtype == torch.int8 and s.shape == (2, 1)
    assert s[0].item() == 2.0 and s[1].item() == 0.0
    assert q[0].tolist() == [127, -64, 0, 0]  # 1/2 and 0.2 round to even / zero
    assert q[1].tolist() == [0, 0, 0, 0]


def test_layer_storage_and_forward():
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(96, 256, generator=gen) / 16
    layer = Int8Linear(w, torch.bfloat16)
    assert layer.weight.dtype == torch.int8 and layer.weight.shape == (256, 96)
    assert not hasattr(layer, "qweight") and layer.params_dtype == torch.bfloat16
    x = torch.randn(3, 5, 256, generator=gen).bfloat16()
    y, _ = layer(x)
    assert y.shape == (3, 5, 96) and y.dtype == torch.bfloat16
    ref = x.double() @ w.double().t()
    assert ((y.double() - ref).norm() / ref.norm()).item() < 0.02


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.float8_e4m3fn])
def test_non_float_input_raises_the_dispatch_error(dtype):
    layer = Int8Linear(torch.randn(64, 128), torch.bfloat16)
    rejection = layer.input_rejection(dtype)
    with pytest.raises(RuntimeError) as exc:
        layer(torch.zeros(2, 128).to(dtype))
    assert str(exc.value) == str(rejection.error)
    assert "dynamic_scaled_int8_quant_kernel" in str(exc.value)
