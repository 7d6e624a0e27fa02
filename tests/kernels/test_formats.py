"""fp8 e4m3fn and e2m1 helpers: explicit clamp, round-to-nearest-even, packing."""

from __future__ import annotations

import math

import pytest
import torch

from dtype_lint.kernels_ref.formats import (
    E2M1_VALUES,
    FP8,
    FP8_MAX,
    e2m1_decode,
    e2m1_encode,
    fp8_bytes,
    fp8_from_bytes,
    join_fields,
    pack_nibbles,
    quantize_fp8_weight,
    to_fp8,
    uint_fields,
    unpack_nibbles,
    weight_fp8_scale,
)


def e4m3_value(code: int) -> float:
    """Decode an e4m3fn bit pattern from its definition (bias 7, no inf, 0x7F/0xFF NaN)."""
    sign = -1.0 if code & 0x80 else 1.0
    exp, mant = (code >> 3) & 0xF, code & 0x7
    if exp == 0xF and mant == 0x7:
        return math.nan
    if exp == 0:
        return sign * mant / 8 * 2.0**-6
    return sign * (1 + mant / 8) * 2.0 ** (exp - 7)


FINITE_CODES = [c for c in range(256) if not math.isnan(e4m3_value(c))]


def nearest_even_e4m3(x: float) -> float:
    """Brute force: nearest finite e4m3 value after clamping to ±448; ties to an even mantissa."""
    x = max(-FP8_MAX, min(FP8_MAX, x))
    best = min(abs(x - e4m3_value(c)) for c in FINITE_CODES)
    ties = [c for c in FINITE_CODES if abs(x - e4m3_value(c)) == best]
    even = [c for c in ties if c & 1 == 0] or ties
    return e4m3_value(even[0])


def test_fp8_constants():
    assert FP8 is torch.float8_e4m3fn
    assert FP8_MAX == 448.0 == torch.finfo(torch.float8_e4m3fn).max


def test_fp8_byte_views_decode_like_the_format_definition():
    raw = torch.tensor(FINITE_CODES, dtype=torch.uint8)
    decoded = fp8_from_bytes(raw).float().tolist()
    assert decoded == [e4m3_value(c) for c in FINITE_CODES]
    assert torch.equal(fp8_bytes(fp8_from_bytes(raw)), raw)


def test_to_fp8_is_round_to_nearest_even_on_midpoints_and_random_values():
    grid = sorted({abs(e4m3_value(c)) for c in FINITE_CODES})
    midpoints = [(a + b) / 2 for a, b in zip(grid, grid[1:])]
    gen = torch.Generator().manual_seed(0)
    rand = (torch.randn(400, generator=gen) * 30).tolist()
    values = midpoints + [-m for m in midpoints] + rand
    x = torch.tensor(values, dtype=torch.float32)
    got = to_fp8(x).float().tolist()
    expected = [nearest_even_e4m3(float(v)) for v in x.tolist()]
    assert got == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1 + 1 / 16, 1.0),  # tie between 1 and 1.125: even mantissa 000
        (1 + 3 / 16, 1.25),  # tie between 1.125 and 1.25: even mantissa 010
        (17.0, 16.0),
        (19.0, 20.0),
        (2.0**-10, 0.0),  # half the smallest subnormal ties to zero
        (1.5 * 2.0**-9, 2.0**-8),
    ],
)
def test_to_fp8_ties(value, expected):
    assert to_fp8(torch.tensor([value])).float().item() == expected


@pytest.mark.parametrize("value", [449.0, 464.0, 480.0, 1e6, math.inf])
def test_to_fp8_clamps_instead_of_overflowing(value):
    x = torch.tensor([value, -value])
    assert to_fp8(x).float().tolist() == [448.0, -448.0]


def test_weight_scale_floor_keeps_zero_rows_finite():
    w = torch.zeros(2, 16)
    w[1, 3] = -3.5
    scale = weight_fp8_scale(w.abs().amax(dim=1))
    assert scale[0].item() == torch.tensor(1e-12 / 448, dtype=torch.float32).item()
    assert scale[1].item() == torch.tensor(3.5, dtype=torch.float32).div(448).item()
    codes = quantize_fp8_weight(w, scale.unsqueeze(1))
    assert not torch.isnan(codes.float()).any()
    assert codes[0].float().abs().max().item() == 0.0
    assert codes[1, 3].float().item() == -448.0


# ----------------------------------------------------------------------------- e2m1


def nearest_even_e2m1_code(v: float) -> int:
    mag = abs(v)
    best = min(abs(mag - g) for g in E2M1_VALUES)
    ties = [i for i, g in enumerate(E2M1_VALUES) if abs(mag - g) == best]
    idx = [i for i in ties if i % 2 == 0][0] if len(ties) > 1 else ties[0]
    return idx | (8 if v < 0 else 0)


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (0.25, 0), (0.2501, 1), (0.7499, 1), (0.75, 2), (1.25, 2), (1.2501, 3),
        (1.7499, 3), (1.75, 4), (2.5, 4), (2.5001, 5), (3.4999, 5), (3.5, 6),
        (5.0, 6), (5.0001, 7), (6.0, 7), (-0.0, 0), (-0.1, 8), (-0.5, 9), (-6.0, 15),
    ],
)
def test_e2m1_thresholds(value, code):
    assert e2m1_encode(torch.tensor([value])).item() == code


def test_e2m1_encode_is_nearest_even_and_decode_inverts_it():
    grid = list(E2M1_VALUES)
    mids = [(a + b) / 2 for a, b in zip(grid, grid[1:])]
    values = torch.tensor(
        grid + mids + [-m for m in mids] + torch.linspace(-6, 6, 241).tolist(), dtype=torch.float32
    )
    codes = e2m1_encode(values)
    assert codes.dtype == torch.uint8
    assert codes.tolist() == [nearest_even_e2m1_code(v) for v in values.tolist()]
    decoded = e2m1_decode(torch.arange(16))
    assert decoded.tolist() == list(E2M1_VALUES) + [-v for v in E2M1_VALUES]


def test_pack_nibbles_puts_even_k_in_the_low_nibble():
    codes = torch.tensor([[0x1, 0x2, 0x3, 0xC]], dtype=torch.uint8)
    packed = pack_nibbles(codes)
    assert packed.tolist() == [[0x21, 0xC3]]
    assert torch.equal(unpack_nibbles(packed), codes)


def test_pack_nibbles_round_trip():
    gen = torch.Generator().manual_seed(1)
    codes = torch.randint(0, 16, (3, 5, 32), generator=gen).to(torch.uint8)
    assert torch.equal(unpack_nibbles(pack_nibbles(codes)), codes)


def test_int32_fields_round_trip_including_the_sign_bit():
    words = torch.tensor([0, 1, -1, -(2**31), 0x12345678, -0x0EDCBA98], dtype=torch.int32)
    bytes_ = uint_fields(words, 8, 4)
    assert bytes_[4].tolist() == [0x78, 0x56, 0x34, 0x12]
    assert bytes_[2].tolist() == [0xFF] * 4
    assert torch.equal(join_fields(bytes_, 8), words)
    assert torch.equal(join_fields(uint_fields(words, 4, 8), 4), words)


def test_package_import_is_light_and_reexports_lazily():
    import subprocess
    import sys

    import dtype_lint.kernels_ref as package
    from dtype_lint.kernels_ref.marlin_fp8 import MarlinFp8Linear

    assert package.MarlinFp8Linear is MarlinFp8Linear
    code = "import sys, dtype_lint.kernels_ref; assert 'torch' not in sys.modules, 'eager torch'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_matmul_fp32_rejects_other_dtypes():
    from dtype_lint.kernels_ref.formats import matmul_fp32

    # Fixed inputs, and the comparison the function documents: it multiplies contiguous operands,
    # so it equals `a @ b.contiguous()` bit for bit, while `a @ a.t()` (a transposed operand) may
    # take another BLAS kernel and differ in the last bit; against fp64 it is within fp32 rounding.
    a = torch.randn(2, 3, generator=torch.Generator().manual_seed(0))
    got = matmul_fp32(a, a.t())
    assert torch.equal(got, a @ a.t().contiguous())
    exact = a.double() @ a.double().t()
    assert torch.allclose(got.double(), exact, rtol=4 * 2**-24, atol=4 * 2**-24 * float(exact.abs().max()))
    with pytest.raises(TypeError):
        matmul_fp32(a.half(), a.t().half())
