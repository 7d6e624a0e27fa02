"""The CUDA kernels themselves, run on the CPU by tests/kernels/simt_emulator.py.

The ops' CUDA wrappers launch the real kernel code (the text NVRTC compiles, built by g++ behind
a SIMT prelude) on CPU tensors, and gpu_check's kernel checks compare them with the PyTorch
reference under the GPU run's rules: bit-exact codes, scales, pack/repack and dequantization,
§5 bounds for GEMM, attention and merge outputs, the same errors from both. On the GPU the same
checks run on the device; this catches layout, indexing, masking and argument-order bugs first.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from dtype_lint.kernels_ref import build
from dtype_lint.kernels_ref.harness import gpu_check

from .simt_emulator import Emulator, gxx, patch_ops

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
    checks = gpu_check.KernelChecks("cpu", "cuda", gpu_check.SIZES["tiny"], seed=1)
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
        checks = gpu_check.KernelChecks("cpu", "cuda", gpu_check.SIZES["tiny"], seed=2)
        for group in GROUPS:
            getattr(checks, group)()
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


@pytest.mark.slow
def test_verify_matrix_on_emulated_kernels(emulated) -> None:
    """The whole MLA context prefill (fixer's pre/post, chunks, mask, merge) with every kernel
    call routed to the emulated CUDA kernels, scenario A: all of §4's assertions must hold.

    By default two backends (Marlin: bf16 attention and the Marlin GEMM; fp8_p: per-token quant,
    scaled mm and fp8 attention), about 15 s; ``DTYPE_LINT_EMULATED_VERIFY=1`` runs the full matrix
    (about a minute on two cores).
    """
    import os

    from dtype_lint.kernels_ref import ops

    try:
        from dtype_lint.kernels_ref.harness import verify
    except ImportError as e:
        pytest.skip(f"verify harness not importable: {e}")
    backends = None if os.environ.get("DTYPE_LINT_EMULATED_VERIFY") == "1" else ["marlin", "fp8_p"]
    with ops.installed("cuda"):
        report = verify.run_matrix("cpu", ["A"], [0], backends=backends)
    assert report["ok"], report["violations"]
    assert {"mla_prefill_attention_fwd", "mask_empty_context", "merge_attn_states", "marlin_gemm_fp8"} <= set(emulated.calls)
