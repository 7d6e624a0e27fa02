"""The CUDA kernels themselves, run on the CPU by tests/kernels/simt_emulator.py.

The ops' CUDA wrappers launch the real kernel code (the text NVRTC compiles, built by g++ behind
a SIMT prelude) on CPU tensors, and gpu_check's kernel checks compare them with the PyTorch
reference under the GPU run's rules: bit-exact codes, scales, pack/repack and dequantization, the
kernel-check bounds for GEMM, attention and merge outputs, the same errors from both. The shapes are
the GPU run's in miniature (``SIZES["emulated"]``: K=256 with two g128 groups, N over three GEMM
tiles, d_qk=192, d_v=128, query and key tiles split), every launch runs in forward and in reverse
thread order (a missing barrier shows as a difference), and the whole verify matrix runs on the
emulated kernels. On the GPU the same checks run on the device; this catches layout, indexing,
masking, barrier and argument-order bugs first.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from dtype_lint.kernels_ref import build
from dtype_lint.kernels_ref.harness import gpu_check

from .simt_emulator import Emulator, gxx, patch_ops

# g++ builds of every kernel and emulated launches: slow, and part of the default suite all the same.
pytestmark = pytest.mark.slow

GROUPS = ("marlin", "fp8", "nvfp4", "linear", "attention", "contract")


@pytest.fixture(scope="module")
def emulator() -> Emulator:
    if gxx() is None:
        pytest.skip("g++ not found: cannot build the SIMT emulation")
    cache = Path(tempfile.gettempdir()) / "dtype_lint_simt_cache"
    cache.mkdir(exist_ok=True)
    emu = Emulator(cache)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(emu._lib, [f.stem for f in build.cuda_files()]))
    return emu


@pytest.fixture
def emulated(monkeypatch, emulator) -> Emulator:
    patch_ops(monkeypatch, emulator)
    emulator.history.update(emulator.calls)
    emulator.calls.clear()
    return emulator


@pytest.mark.parametrize("group", GROUPS)
def test_kernel_checks_pass_on_emulated_kernels(group, emulated) -> None:
    checks = gpu_check.KernelChecks("cpu", "cuda", gpu_check.SIZES["emulated"], seed=1)
    results = getattr(checks, group)()
    bad = {k: v for k, v in results.items() if not v["ok"]}
    assert not bad, bad
    if group != "contract":
        assert emulated.calls, "no kernel was launched: the check fell back to torch"


def test_every_kernel_is_exercised(emulated) -> None:
    """The checks above between them launch every kernel (re-run here for the ones not yet seen
    in this session, so the test also holds alone)."""
    seen = set(emulated.history)
    missing = set(build.all_kernel_signatures()) - seen
    if missing:
        checks = gpu_check.KernelChecks("cpu", "cuda", gpu_check.SIZES["emulated"], seed=2)
        for group in GROUPS:
            getattr(checks, group)()
        # What the re-run launched is in `calls` until the next test's fixture folds it in.
        emulated.history.update(emulated.calls)
    assert set(emulated.history) == set(build.all_kernel_signatures())


def test_attention_causal_rows_without_keys(emulated) -> None:
    """Causal, bottom-right aligned, more queries than keys: the first rows see no key at all."""
    import torch

    from dtype_lint.kernels_ref import attention as at
    from dtype_lint.kernels_ref import ops

    g = torch.Generator().manual_seed(3)
    q = torch.randn(40, 2, 48, generator=g).bfloat16()
    k = torch.randn(25, 2, 48, generator=g).bfloat16()
    v = torch.randn(25, 2, 24, generator=g).bfloat16()
    for empty in ("fa2", "fa3"):
        got = ops.mla_prefill_attention(q, k, v, [0, 40], [0, 25], 0.15, True, torch.bfloat16, empty, backend="cuda")
        want = at.mla_prefill_attention(q, k, v, [0, 40], [0, 25], 0.15, True, torch.bfloat16, empty)
        assert gpu_check.compare_close(got[0], want[0])["ok"]
        assert gpu_check.compare_lse(got[1], want[1])["ok"]


def test_the_order_check_catches_a_missing_barrier(emulator, tmp_path, monkeypatch) -> None:
    """Remove the barrier between the per-thread amax and the tree reduction of the per-token
    quantizer: forward order reads partial maxima that reverse order has already written."""
    import torch

    from dtype_lint.kernels_ref import ops

    from .simt_emulator import ThreadOrderRace

    cu = build.CUDA_DIR / "fp8_linear.cu"
    text = cu.read_text()
    mutated = text.replace("  red[threadIdx.x] = amax;\n  __syncthreads();\n", "  red[threadIdx.x] = amax;\n", 1)
    assert mutated != text
    cuda_dir = tmp_path / "cuda"
    cuda_dir.mkdir()
    for f in build.CUDA_DIR.iterdir():
        (cuda_dir / f.name).write_text(mutated if f.name == cu.name else f.read_text())
    monkeypatch.setattr(build, "CUDA_DIR", cuda_dir)
    emu = Emulator(tmp_path / "emu")
    patch_ops(monkeypatch, emu)
    x = torch.randn(4, 700, generator=torch.Generator().manual_seed(5)).bfloat16()
    with pytest.raises(ThreadOrderRace, match="fp8_quant_per_token"):
        ops.fp8_quant_per_token(x, backend="cuda")


@pytest.mark.slow
@pytest.mark.full("each kernel's emulated checks above and vLLM's own prefill functions on the emulated "
                   "kernels below (the crash rows and the rows whose kernels differ)")
def test_verify_matrix_on_emulated_kernels(emulated) -> None:
    """The whole MLA context prefill (fixer's pre/post, chunks, mask, merge; every row of the
    matrix) with every kernel call routed to the emulated CUDA kernels, scenario A: all of the
    matrix's checks must hold. The thread-order check is left to the kernel checks above here
    (it doubles the time and the matrix launches the same kernels)."""
    from dtype_lint.kernels_ref import ops
    from dtype_lint.kernels_ref.harness import verify

    emulated.check_orders = False
    try:
        with ops.installed("cuda"):
            report = verify.run_matrix("cpu", ["A"], [0], upstream=False)
    finally:
        emulated.check_orders = True
    assert report["ok"], report["violations"]
    assert {"mla_prefill_attention_fwd", "mask_empty_context", "merge_attn_states", "marlin_gemm_fp8",
            "fp8_quant_per_token", "fp8_scaled_mm", "nvfp4_quant", "nvfp4_mm", "awq_gemm",
            "unquantized_linear"} <= set(emulated.calls)


@pytest.mark.slow
@pytest.mark.network
def test_vllms_functions_on_emulated_kernels(emulated, vllm_0271, vllm_0280) -> None:
    """vLLM's own prefill functions (0.27.1, its rewrite, 0.28.0) on the emulated CUDA kernels, on
    the crash rows and the rows whose kernels differ, scenario S (both releases cut alike)."""
    from dtype_lint.kernels_ref import ops
    from dtype_lint.kernels_ref.harness import verify

    emulated.check_orders = False
    try:
        with ops.installed("cuda"):
            report = verify.run_matrix("cpu", ["S"], [0], backends=["marlin", "awq", "fp8_p", "nvfp4"])
    finally:
        emulated.check_orders = True
    assert report["ok"], report["violations"]
    assert report["summary"]["vllm"]["marlin"]["bit_identical"]["ours=0.28.0"]
