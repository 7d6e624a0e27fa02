"""Every reference layer raises, for each input dtype, exactly what its ``input_rejection`` says:
the verify matrix predicts outcomes from ``input_rejection``, so the two must never drift."""

from __future__ import annotations

import traceback

import pytest
import torch

from dtype_lint.kernels_ref.harness.backends import BACKENDS

DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn, torch.int8, torch.uint8, torch.int32)
# A small weight every backend builds with its own tiles, with one 128-wide group (out 256, in
# 128): what a forward raises depends on the input's dtype, never the size; 512 x 256 tripled the cost.
W = torch.randn(256, 128, generator=torch.Generator().manual_seed(0)) / 16


@pytest.mark.parametrize("backend_id", sorted(BACKENDS))
def test_forward_raises_exactly_the_declared_rejection(backend_id):
    b = BACKENDS[backend_id]
    layer = b.build(W, b.model_dtype, 4.0)
    for dtype in DTYPES:
        x = torch.randn(3, W.shape[1]).clamp(-4, 4).to(dtype)
        rejection = layer.input_rejection(dtype)
        try:
            layer(x)
        except Exception as exc:  # noqa: BLE001 - the exception is the data under test
            assert rejection is not None, (backend_id, dtype, exc)
            assert (type(exc), str(exc)) == (type(rejection.error), str(rejection.error)), (backend_id, dtype)
            assert rejection.raised_in in [f.name for f in traceback.extract_tb(exc.__traceback__)]
        else:
            assert rejection is None, (backend_id, dtype)
