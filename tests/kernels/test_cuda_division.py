"""Reference arithmetic as CUDA does it: no quantizer divides by a Python scalar.

PyTorch on CUDA computes ``tensor / python_float`` (and ``tensor / cpu_0d_tensor``) as a multiply
by the rounded reciprocal (``div_true_kernel_cuda``'s CPU-scalar branch), while the CUDA kernels
divide with ``__fdiv_rn``. On the CPU both are a true division, so no CPU comparison can show the
difference. :class:`CudaScalarDivision` makes the CPU do what CUDA would: every division by a
Python number or a 0-d tensor becomes a multiply by the fp32 reciprocal. Under it the reference
quantizers must give exactly what they give without it (they divide by tensors of the dividend's
shape, :func:`formats.div_exact`), and the old formula must not (so the mimic is not vacuous).
"""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from dtype_lint.kernels_ref import fp8_linear, int8_linear, linear_basic, marlin_fp8, nvfp4
from dtype_lint.kernels_ref.formats import FP8_MAX

_DIVISIONS = {torch.div, torch.true_divide, torch.Tensor.div, torch.Tensor.__truediv__, torch.Tensor.true_divide,
              torch.Tensor.div_, torch.Tensor.__itruediv__}


class CudaScalarDivision(TorchFunctionMode):
    """Divisions by a scalar computed as CUDA computes them: ``a * fp32(1 / b)``."""

    def __init__(self) -> None:
        super().__init__()
        self.rewritten = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _DIVISIONS and len(args) == 2 and not kwargs.get("rounding_mode"):
            a, b = args
            scalar = isinstance(b, (int, float)) or (isinstance(b, torch.Tensor) and b.dim() == 0 and a.dim() > 0)
            if isinstance(a, torch.Tensor) and a.is_floating_point() and scalar:
                self.rewritten += 1
                inv = torch.reciprocal(torch.tensor(float(b), dtype=torch.float32))
                return a * inv.to(a.dtype)
        return func(*args, **kwargs)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def _rows(dtype=torch.bfloat16, n=4096, k=256, seed=0) -> torch.Tensor:
    return (torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 3).to(dtype)


def test_the_mimic_shows_the_mismatch_class():
    """The old per-token scale (``amax / 448``) under CUDA's scalar division: most bf16 rows differ."""
    amax = _rows().float().abs().amax(dim=-1, keepdim=True)
    exact = amax / FP8_MAX
    with CudaScalarDivision() as mode:
        cuda_like = amax / FP8_MAX
    assert mode.rewritten == 1
    differ = int((exact != cuda_like).sum())
    assert differ > 0.4 * amax.numel(), differ  # about 60% of the rows, as on a GPU


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_per_token_fp8_quantizer_is_division_exact(dtype):
    x = _rows(dtype)
    want = fp8_linear.fp8_quant_per_token(x)
    with CudaScalarDivision() as mode:
        got = fp8_linear.fp8_quant_per_token(x)
    assert mode.rewritten == 0
    assert all(torch.equal(_bits(a), _bits(b)) for a, b in zip(got, want))


def test_weight_and_activation_quantizers_are_division_exact():
    w = torch.randn(320, 256, generator=torch.Generator().manual_seed(1)) / 16
    x = _rows(n=64)
    calls = {
        "marlin": lambda: marlin_fp8.marlin_quantize_fp8(w, 128),
        "fp8 weight": lambda: fp8_linear.Fp8Linear(w).weight_scale,
        "fp8 block": lambda: fp8_linear.Fp8BlockLinear(w).weight_scale_inv,
        "fp8 groups": lambda: fp8_linear.fp8_quant_per_token_group(x),
        "nvfp4": lambda: nvfp4.NvFp4Linear(w, input_amax=4.0).weight,
        "nvfp4 act": lambda: nvfp4.scaled_fp4_quant(x, torch.tensor(2688 / 4.0)),
        "awq": lambda: linear_basic.awq_quantize(w, torch.bfloat16),
        "int8": lambda: int8_linear.int8_quant_per_token(x),
        "int8 weight": lambda: int8_linear.Int8Linear(w).weight_scale,
    }
    for name, call in calls.items():
        want = call()
        with CudaScalarDivision() as mode:
            got = call()
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        assert all(torch.equal(_bits(a.detach()), _bits(b.detach())) for a, b in zip(got, want)), name
        assert mode.rewritten == 0, name
