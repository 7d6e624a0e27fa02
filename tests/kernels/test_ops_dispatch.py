"""kernels_ref.ops on a machine without CUDA: dispatch, errors, and the CUDA wrappers' launches.

* ``backend="auto"`` on CPU tensors is the PyTorch reference, bit for bit.
* ``backend="cuda"`` on CPU tensors raises :class:`CudaUnavailable` naming the op and the device.
* The CUDA wrappers run the reference's checks in its order: for a battery of bad arguments both
  raise the same exception type and message (the ``unsupported `a` scalar_type`` contract).
* With ``build.launch`` replaced by a recorder and the device test forced, every CUDA wrapper runs
  its host code on CPU tensors and the recorder checks each launch against the kernel's parsed C
  signature (name, argument count, pointer/int/float kinds, grid and block sizes).
* :func:`ops.installed` swaps and restores the reference modules' call sites without recursion.
"""

from __future__ import annotations

import pytest
import torch

from dtype_lint.kernels_ref import attention as at
from dtype_lint.kernels_ref import build, ops
from dtype_lint.kernels_ref import fp8_linear as fl
from dtype_lint.kernels_ref import linear_basic as lb
from dtype_lint.kernels_ref import marlin_fp8 as mf
from dtype_lint.kernels_ref import nvfp4 as nv
from dtype_lint.kernels_ref.formats import FP8

GEN = torch.Generator().manual_seed(0)


def randn(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, generator=GEN) * scale).to(dtype)


@pytest.fixture(scope="module")
def marlin_layer():
    return mf.MarlinFp8Linear(randn(128, 64, scale=0.125), torch.bfloat16)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _same(a, b) -> bool:
    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b))
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


# ----------------------------------------------------------------------------- dispatch on CPU


def test_auto_on_cpu_is_the_reference(marlin_layer) -> None:
    a = randn(8, 64, dtype=torch.bfloat16)
    layer = marlin_layer
    assert _same(ops.marlin_gemm(a, layer.weight, layer.weight_scale, 8, 128, 64),
                 mf.marlin_gemm(a, layer.weight, layer.weight_scale, 8, 128, 64))
    x = randn(5, 64, dtype=torch.bfloat16, scale=3)
    assert _same(ops.fp8_quant_per_token(x), fl.fp8_quant_per_token(x))
    assert _same(ops.scaled_fp4_quant(x, 2.5), nv.scaled_fp4_quant(x, 2.5))
    q, k, v = randn(6, 2, 32, dtype=torch.bfloat16), randn(9, 2, 32, dtype=torch.bfloat16), randn(9, 2, 16, dtype=torch.bfloat16)
    got = ops.mla_prefill_attention(q, k, v, [0, 2, 6], [0, 9, 9], 0.2, False, torch.bfloat16)
    want = at.mla_prefill_attention(q, k, v, [0, 2, 6], [0, 9, 9], 0.2, False, torch.bfloat16)
    assert _same(got, want)


def test_forcing_cuda_on_cpu_is_a_clear_error(marlin_layer) -> None:
    a = randn(8, 64, dtype=torch.bfloat16)
    with pytest.raises(build.CudaUnavailable, match=r"marlin_gemm: backend='cuda' needs CUDA tensors, got device\(s\) \['cpu'\]"):
        ops.marlin_gemm(a, marlin_layer.weight, marlin_layer.weight_scale, 8, 128, 64, backend="cuda")
    with pytest.raises(build.CudaUnavailable, match="fp8_quant_per_token: backend='cuda'"):
        ops.fp8_quant_per_token(a, backend="cuda")
    assert issubclass(build.CudaUnavailable, RuntimeError)
    with pytest.raises(ValueError, match="backend must be one of"):
        ops.fp8_quant_per_token(a, backend="triton")


def test_cuda_unavailable_here() -> None:
    assert build.cuda_available() is (torch.cuda.is_available() and build.cuda_available())
    if not torch.cuda.is_available():
        assert build.cuda_available() is False


def test_use_backend_scopes_auto() -> None:
    assert ops.default_backend() == "auto"
    with ops.use_backend("torch"):
        assert ops.default_backend() == "torch"
    assert ops.default_backend() == "auto"


# ----------------------------------------------------------------------------- error parity


def _outcome(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the exception is the result
        return type(e), str(e)
    return None


def _marlin_cases(layer):
    a = randn(4, 64, dtype=torch.bfloat16)
    w, s = layer.weight, layer.weight_scale
    return {
        "a int32": (a.to(torch.int32), w, s, 4, 128, 64),
        "a fp32": (a.float(), w, s, 4, 128, 64),
        "a uint8": (a.to(torch.uint8), w, s, 4, 128, 64),
        "a fp8": (a.to(FP8), w, s, 4, 128, 64),
        "a int8": (a.to(torch.int8), w, s, 4, 128, 64),
        "a 3-D": (a.view(2, 2, 64), w, s, 4, 128, 64),
        "size_m": (a, w, s, 5, 128, 64),
        "size_k": (a, w, s, 4, 128, 48),
        "b int64": (a, w.long(), s, 4, 128, 64),
        "b rows": (a[:, :48], w, s, 4, 128, 48),
        "size_n": (a, w, s, 4, 64, 64),
        "scales 1-D": (a, w, s[0], 4, 128, 64),
        "scales cols": (a, w, s[:, :64], 4, 128, 64),
        "scales groups": (a, w, s.repeat(3, 1), 4, 128, 64),
        "scales fp32 (reference-only check)": (a, w, s.float(), 4, 128, 64),
    }


def test_marlin_checks_mirror_the_reference(marlin_layer) -> None:
    for name, args in _marlin_cases(marlin_layer).items():
        want = _outcome(lambda: mf.marlin_gemm(*args))
        assert want is not None, name
        assert _outcome(lambda: ops.check_marlin_gemm(*args)) == want, name
    # An fp16 `a` with bf16 scales passes both: upstream has no b_scales dtype check.
    a = randn(4, 64, dtype=torch.float16)
    assert _outcome(lambda: ops.check_marlin_gemm(a, marlin_layer.weight, marlin_layer.weight_scale, 4, 128, 64)) is None


def test_unsupported_a_scalar_type_text_is_exact(marlin_layer) -> None:
    a = randn(4, 64).to(torch.int32)
    with pytest.raises(RuntimeError) as e:
        ops.check_marlin_gemm(a, marlin_layer.weight, marlin_layer.weight_scale, 4, 128, 64)
    assert str(e.value) == "unsupported `a` scalar_type"


def test_fp8_scaled_mm_checks_mirror_the_reference() -> None:
    a = randn(4, 32).to(FP8)
    b = randn(16, 32).to(FP8).t()
    sa, sb = torch.ones(4), torch.ones(16)
    cases = {
        "bf16 a": (a.float().bfloat16(), b, sa, sb),
        "shape": (a, b[:8], sa, sb),
        "1-D": (a[0], b, sa, sb),
        "scale_a": (a, b, torch.ones(3), sb),
        "scale_b": (a, b, sa, torch.ones(2)),
    }
    for name, args in cases.items():
        want = _outcome(lambda: fl.fp8_scaled_mm(*args, torch.bfloat16))
        assert want is not None, name
        assert _outcome(lambda: ops.check_fp8_scaled_mm(*args)) == want, name


def test_attention_checks_mirror_the_reference() -> None:
    q, k, v = randn(6, 2, 32, dtype=torch.bfloat16), randn(9, 2, 32, dtype=torch.bfloat16), randn(9, 2, 16, dtype=torch.bfloat16)
    cases = {
        "empty mode": (q, k, v, [0, 6], [0, 9], "fa4"),
        "dtype mix": (q, k.half(), v, [0, 6], [0, 9], "fa2"),
        "fp32": (q.float(), k.float(), v.float(), [0, 6], [0, 9], "fa2"),
        "2-D": (q[:, 0], k[:, 0], v[:, 0], [0, 6], [0, 9], "fa2"),
        "heads": (q, k[:, :1], v[:, :1], [0, 6], [0, 9], "fa2"),
        "lengths": (q, k, v, [0, 6], [0, 4, 9], "fa2"),
        "start": (q, k, v, [1, 6], [0, 9], "fa2"),
        "end": (q, k, v, [0, 5], [0, 9], "fa2"),
    }
    for name, (qq, kk, vv, cq, ck, empty) in cases.items():
        want = _outcome(lambda: at.mla_prefill_attention(qq, kk, vv, cq, ck, 0.1, False, torch.bfloat16, empty))
        assert want is not None, name
        got = _outcome(lambda: ops.check_mla_prefill_attention(qq, kk, vv, cq, ck, empty))
        assert got == want, name


def test_scaled_fp4_quant_assert_and_merge_output_scale(monkeypatch) -> None:
    # The CUDA path's own checks run before the device test: force it to be taken.
    monkeypatch.setattr(ops, "_use_cuda", lambda *a, **k: True)
    x = randn(4, 32)
    for fn in (lambda: nv.scaled_fp4_quant(x, 1.0), lambda: ops.scaled_fp4_quant(x, 1.0, backend="cuda")):
        with pytest.raises(AssertionError, match=r"^input.dtype needs to be fp16 or bf16 but got torch.float32.$"):
            fn()
    o = randn(4, 1, 8)
    lse = torch.zeros(1, 4)
    with pytest.raises(NotImplementedError):
        ops.merge_attn_states(o, o, lse, o, lse, output_scale=torch.ones(1), backend="cuda")


def test_merge_head_dim_rule() -> None:
    o = randn(4, 2, 12, dtype=torch.bfloat16)
    lse = torch.zeros(2, 4)
    assert ops.merge_unsupported(o, o, lse, o, lse, None) == "headsize must be multiple of pack_size:8"
    o16 = randn(4, 2, 16, dtype=torch.bfloat16)
    assert ops.merge_unsupported(o16, o16, lse, o16, lse, lse) is None
    of = randn(4, 2, 12)
    assert ops.merge_unsupported(of, of, lse, of, lse, None) is None  # fp32: packs of 4
    # auto on CPU falls back, as vLLM falls back to Triton
    out = torch.empty_like(o)
    ops.merge_attn_states(out, o, lse, o, lse)
    assert torch.equal(out, o)


# ----------------------------------------------------------------------------- CUDA wrappers, launch recorded


class LaunchRecorder:
    """Stands in for ``build.launch``: checks each call against the kernel's parsed signature."""

    def __init__(self) -> None:
        self.sigs = build.all_kernel_signatures()
        self.calls: list[str] = []

    def __call__(self, name, grid, block, args, *, device, shared_mem=0) -> None:
        assert name in self.sigs, f"no kernel {name}"
        _, sig = self.sigs[name]
        assert len(args) == len(sig), f"{name}: {len(args)} args for signature {sig}"
        for i, (kind, value) in enumerate(zip(sig, args)):
            where = f"{name} arg {i} ({kind})"
            if kind == "p":
                assert value is None or isinstance(value, torch.Tensor), where
                if isinstance(value, torch.Tensor):
                    assert value.dtype != FP8, f"{where}: pass fp8 as its uint8 bytes"
            elif kind in "ilI":
                assert isinstance(value, int) and not isinstance(value, bool), f"{where}: {value!r}"
                if kind == "i":
                    assert -(2**31) <= value < 2**31, where
            elif kind == "f":
                assert isinstance(value, float), f"{where}: {value!r}"
            build._arg(kind, value) if _has_numpy() else None
        assert 1 <= len(grid) <= 3 and all(isinstance(g, int) and g >= 1 for g in grid), (name, grid)
        assert len(block) == 1 and 1 <= block[0] <= 1024, (name, block)
        if name.endswith(("_mm", "_gemm", "gemm_fp8", "_linear")):
            assert block == (256,), f"{name}: tile GEMMs are written for 256 threads"
        if name == "mla_prefill_attention_fwd":
            assert block == (256,) and grid[1] <= 65535
        self.calls.append(name)


def _has_numpy() -> bool:
    try:
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture
def recorder(monkeypatch) -> LaunchRecorder:
    rec = LaunchRecorder()
    monkeypatch.setattr(ops, "launch", rec)
    monkeypatch.setattr(ops, "_use_cuda", lambda op, backend, tensors, unsupported=None: backend != "torch" and unsupported is None)
    return rec


def test_every_cuda_wrapper_launches_a_well_formed_kernel(recorder, marlin_layer) -> None:
    L = marlin_layer
    a = randn(8, 64, dtype=torch.bfloat16)
    ops.marlin_gemm(a, L.weight, L.weight_scale, 8, 128, 64, backend="cuda")
    ops.marlin_dequantize_fp8(L.weight, L.weight_scale, 64, 128, torch.bfloat16, backend="cuda")
    codes = randn(64, 128).to(FP8)
    ops.pack_fp8_to_int32(codes, backend="cuda")
    ops.marlin_repack_fp8(mf.pack_fp8_to_int32(codes), 64, 128, backend="cuda")

    x = randn(5, 64, dtype=torch.bfloat16)
    xq, xs = ops.fp8_quant_per_token(x, backend="cuda")
    assert xq.dtype == FP8 and xq.shape == x.shape and xs.shape == (5, 1)
    f8 = fl.Fp8Linear(randn(32, 64, scale=0.1), torch.bfloat16)
    y = ops.fp8_scaled_mm(fl.fp8_quant_per_token(x)[0], f8.weight, xs, f8.weight_scale, torch.bfloat16, backend="cuda")
    assert y.shape == (5, 32) and y.dtype == torch.bfloat16

    n4 = nv.NvFp4Linear(randn(32, 64, scale=0.1), torch.bfloat16)
    p, sf = ops.scaled_fp4_quant(x, n4.input_global_scale_inv, backend="cuda")
    assert p.shape == (5, 32) and p.dtype == torch.uint8 and sf.shape == (5, 4) and sf.dtype == FP8
    pr, sfr = nv.scaled_fp4_quant(x, n4.input_global_scale_inv)
    y = ops.nvfp4_mm(pr, sfr, n4.weight, n4.weight_scale, n4.alpha, torch.bfloat16, backend="cuda")
    assert y.shape == (5, 32)

    w = randn(32, 64, dtype=torch.bfloat16)
    assert ops.unquantized_linear(x, w, backend="cuda").shape == (5, 32)
    awq = lb.AwqLikeLinear(randn(32, 128, scale=0.1), torch.bfloat16)
    assert ops.awq_dequantize(awq.qweight, awq.qzeros, awq.scales, 64, backend="cuda").shape == (128, 32)
    assert ops.awq_gemm(randn(3, 128, dtype=torch.bfloat16), awq.qweight, awq.qzeros, awq.scales, 64, backend="cuda").shape == (3, 32)

    q, k, v = randn(70, 2, 96, dtype=torch.bfloat16), randn(40, 2, 96, dtype=torch.bfloat16), randn(40, 2, 64, dtype=torch.bfloat16)
    out, lse = ops.mla_prefill_attention(q, k, v, [0, 33, 70], [0, 40, 40], 0.1, False, torch.bfloat16, backend="cuda")
    assert out.shape == (70, 2, 64) and lse.shape == (2, 70) and lse.dtype == torch.float32
    ops.mask_empty_context(lse, out, [0, 33, 70], [0, 40, 40], backend="cuda")
    o = torch.empty_like(out)
    ops.merge_attn_states(o, out, lse, out, lse, lse.clone(), 50, backend="cuda")
    ops.merge_attn_states(o, out, lse, out, lse, None, None, backend="cuda")

    launched = set(recorder.calls)
    assert launched == set(recorder.sigs), f"never launched: {set(recorder.sigs) - launched}"


def test_attention_tile_table(recorder) -> None:
    seen = {}

    def capture(name, grid, block, args, *, device, shared_mem=0):
        recorder(name, grid, block, args, device=device, shared_mem=shared_mem)
        seen["grid"], seen["tiles"] = grid, args[13].tolist()

    ops.launch = capture  # the monkeypatch fixture restores ops.launch
    q, k, v = randn(70, 3, 32, dtype=torch.bfloat16), randn(40, 3, 32, dtype=torch.bfloat16), randn(40, 3, 16, dtype=torch.bfloat16)
    ops.mla_prefill_attention(q, k, v, [0, 0, 33, 70], [0, 10, 40, 40], 0.1, False, torch.bfloat16, backend="cuda")
    # request 0 has no queries; request 1 rows 0..32 in tiles of 32; request 2 rows 33..69.
    assert seen["tiles"] == [1, 0, 1, 32, 2, 33, 2, 65]
    assert seen["grid"] == (4, 3)


# ----------------------------------------------------------------------------- installed()


def test_installed_routes_and_restores(marlin_layer) -> None:
    def current():
        return (mf.marlin_gemm, fl.fp8_scaled_mm, nv.scaled_fp4_quant, nv.nvfp4_mm, lb.unquantized_linear,
                lb.awq_gemm, at.merge_attn_states)

    originals = current()
    x = randn(8, 64, dtype=torch.bfloat16)
    layers = [
        marlin_layer,
        fl.Fp8Linear(randn(128, 64, scale=0.1), torch.bfloat16),
        nv.NvFp4Linear(randn(128, 64, scale=0.1), torch.bfloat16),
        lb.UnquantizedLinear(randn(128, 64, scale=0.1), torch.bfloat16),
        lb.AwqLikeLinear(randn(128, 64, scale=0.1), torch.bfloat16),
    ]
    want = [layer(x)[0] for layer in layers]
    with ops.installed("torch"):
        assert all(fn.__wrapped__ is getattr(ops, fn.__name__) for fn in current())
        got = [layer(x)[0] for layer in layers]
        with pytest.raises(RuntimeError, match="expected input dtype"):
            layers[4](x.half())
    assert all(_same(g, w) for g, w in zip(got, want))
    assert current() == originals


def test_installed_cuda_on_cpu_raises_instead_of_silently_using_torch(marlin_layer) -> None:
    with ops.installed("cuda"):
        with pytest.raises(build.CudaUnavailable):
            marlin_layer(randn(2, 64, dtype=torch.bfloat16))
    assert mf.marlin_gemm is ops.REF.marlin_gemm


# ----------------------------------------------------------------------------- one GEMM path


def test_torch_fallbacks_are_the_layers_own_functions() -> None:
    # Each op's PyTorch side is the reference module's function, the one the layer calls: no
    # second GEMM (the old fallbacks used `@`, which TF32 changes on a GPU).
    assert ops.REF.nvfp4_mm is nv.nvfp4_mm
    assert ops.REF.unquantized_linear is lb.unquantized_linear
    assert ops.REF.awq_gemm is lb.awq_gemm
    x = randn(7, 64, dtype=torch.bfloat16)
    layers = {
        "nvfp4": nv.NvFp4Linear(randn(128, 64, scale=0.1), torch.bfloat16),
        "unquantized": lb.UnquantizedLinear(randn(128, 64, scale=0.1), torch.bfloat16),
        "awq": lb.AwqLikeLinear(randn(128, 64, scale=0.1), torch.bfloat16),
    }
    xq, sf = ops.scaled_fp4_quant(x, layers["nvfp4"].input_global_scale_inv, backend="torch")
    nvfp4 = layers["nvfp4"]
    assert _same(ops.nvfp4_mm(xq, sf, nvfp4.weight, nvfp4.weight_scale, nvfp4.alpha, torch.bfloat16, backend="torch"),
                 nvfp4(x)[0])
    assert _same(ops.unquantized_linear(x, layers["unquantized"].weight, backend="torch"), layers["unquantized"](x)[0])
    a = layers["awq"]
    assert _same(ops.awq_gemm(x, a.qweight, a.qzeros, a.scales, a.group_size, backend="torch"), a(x)[0])


def test_matmul_fp32_gives_the_same_bits_for_either_weight_layout() -> None:
    # The exact crash-row check compares a quantized layer (weight [K,N]) with an unquantized twin
    # (weight [N,K], used transposed): the one GEMM path must not depend on the layout.
    from dtype_lint.kernels_ref.formats import matmul_fp32

    for m, k, n in ((7, 512, 1024), (1, 96, 64), (44, 256, 512)):
        a, w = randn(m, k), randn(n, k)
        assert torch.equal(matmul_fp32(a, w.t()), matmul_fp32(a, w.t().contiguous()))


def test_dispatch_runs_the_reference_checks_before_deciding() -> None:
    calls = []

    def check():
        calls.append("check")
        raise RuntimeError("bad argument")

    with pytest.raises(RuntimeError, match="bad argument"):
        ops._dispatch("x", "cuda", [torch.zeros(1)], lambda: calls.append("ref"), lambda: calls.append("cuda"), check=check)
    assert calls == ["check"]
    with ops.use_backend("torch"):
        assert ops._dispatch("x", "auto", [torch.zeros(1)], lambda: "ref", lambda: "cuda", check=check) == "ref"
    with pytest.raises(ValueError, match="backend must be one of"):
        ops._dispatch("x", "triton", [], lambda: None, lambda: None)
