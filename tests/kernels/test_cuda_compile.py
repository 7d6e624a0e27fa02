"""The CUDA kernels compile, and their number-format helpers round exactly like torch.

* Every ``kernels_ref/cuda/*.cu`` compiles with ``nvcc -c -arch=sm_90`` (the CI compile check).
  Without nvcc the test fails when ``CI`` is set and skips otherwise.
* The same files compile with NVRTC, as the GPU check does, when a ``libnvrtc`` can be found
  (``DTYPE_LINT_NVRTC`` or a ``nvidia-cuda-nvrtc`` wheel on ``sys.path``); skipped otherwise.
* ``cuda/common.cuh``'s conversions are ``__host__ __device__``: a small host program built with
  nvcc runs them over every fp16/bf16/e4m3 bit pattern and a few hundred thousand fp32 inputs,
  and the results must equal torch's own conversions bit for bit. This is the part of the
  kernels' bit-exactness that can be proven without a GPU.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from dtype_lint.kernels_ref import build

# One worker compiles every translation unit once (the session fixtures below), not each worker.
pytestmark = pytest.mark.xdist_group("cuda-compile")

CUDA_DIR = build.CUDA_DIR
NVCC_FLAGS = ["-arch=sm_90", "-std=c++17", "-fmad=false"]


def _nvcc() -> str:
    found = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if os.path.exists("/usr/local/bin/nvcc") else None)
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("nvcc not found, and CI is set: the CUDA compile check must run in CI")
    pytest.skip("nvcc not found (set CI=1 to make this a failure)")


def _nvcc_compile(nvcc: str, cu: Path, out_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [nvcc, "-c", *NVCC_FLAGS, "-o", str(out_dir / (cu.stem + ".o")), str(cu)],
        capture_output=True, text=True, timeout=600,
    )


@pytest.fixture(scope="session")
def nvcc_results(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Every translation unit compiled once, in parallel (nvcc is slow; CI has few cores)."""
    nvcc = _nvcc()
    out_dir = tmp_path_factory.mktemp("nvcc")
    files = build.cuda_files()
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return dict(zip((f.name for f in files), pool.map(lambda f: _nvcc_compile(nvcc, f, out_dir), files)))


@pytest.mark.slow
@pytest.mark.parametrize("cu", build.cuda_files(), ids=lambda p: p.name)
def test_nvcc_compiles(cu: Path, nvcc_results) -> None:
    res = nvcc_results[cu.name]
    assert res.returncode == 0, f"nvcc failed on {cu.name}:\n{res.stdout}\n{res.stderr}"
    assert "warning" not in (res.stdout + res.stderr).lower(), res.stdout + res.stderr


def test_every_family_has_a_translation_unit() -> None:
    stems = {p.stem for p in build.cuda_files()}
    assert {"marlin_fp8", "fp8_linear", "nvfp4", "linear_basic", "attention"} <= stems


def _nvrtc() -> build.Nvrtc:
    try:
        return build.Nvrtc()
    except build.CudaUnavailable as e:
        # The test extra installs the nvidia-cuda-nvrtc wheel on Linux x86_64, as CI runs.
        if os.environ.get("CI") and sys.platform.startswith("linux") and platform.machine() == "x86_64":
            pytest.fail(f"no libnvrtc although the test extra provides it: {e}")
        pytest.skip(f"no libnvrtc here: {str(e).splitlines()[0]}")


@pytest.fixture(scope="session")
def nvrtc_results() -> dict[str, tuple[bytes, str]]:
    nv = _nvrtc()
    files = build.cuda_files()
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return dict(zip((f.name for f in files), pool.map(lambda f: build.compile_source(f, "sm_90", nv), files)))


@pytest.mark.slow
@pytest.mark.parametrize("cu", build.cuda_files(), ids=lambda p: p.name)
def test_nvrtc_compiles_to_sm90_cubin(cu: Path, nvrtc_results) -> None:
    image, log = nvrtc_results[cu.name]
    assert image[:4] == b"\x7fELF", "expected a cubin (ELF) for sm_90"
    assert "warning" not in log.lower(), log


def test_kernel_source_splices_local_headers_once() -> None:
    for cu in build.cuda_files():
        src = build.kernel_source(cu)
        assert not re.search(r'#\s*include\s+"', src), cu.name
        assert "#pragma once" not in src
        assert src.count("struct StridedLoad {") <= 1
        assert src.count("DL_HD u16 f32_to_bf16(") == 1


def test_dtype_codes_match_common_cuh() -> None:
    text = (CUDA_DIR / "common.cuh").read_text()
    defines = {m.group(1): int(m.group(2)) for m in re.finditer(r"#define DT_(\w+) (\d+)", text)}
    assert defines == {"F32": 0, "F16": 1, "BF16": 2, "E4M3": 3}
    assert build.DTYPE_CODES == {"float32": 0, "float16": 1, "bfloat16": 2, "float8_e4m3fn": 3}


def test_nvrtc_options_keep_ieee_rounding() -> None:
    opts = build.nvrtc_options("sm_90")
    assert "--fmad=false" in opts and "--ftz=false" in opts and "--prec-div=true" in opts
    assert not any("fast" in o for o in opts)
    assert opts[-1] == "--gpu-architecture=sm_90"


# ----------------------------------------------------------------------------- host conversions

HOST_PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
#include "common.cuh"
// argv: mode, input file, output file.  Modes:
//  d16/db16/d8: decode every 16-/8-bit pattern -> fp32 bits
//  e16/eb16/e8/e2: encode fp32 inputs -> fp16 / bf16 / e4m3 / e2m1 codes
int main(int argc, char** argv) {
  const char* mode = argv[1];
  FILE* out = fopen(argv[3], "wb");
  if (mode[0] == 'd') {
    int n = (mode[1] == '8') ? 256 : 65536;
    for (int i = 0; i < n; ++i) {
      float f = mode[1] == '8' ? e4m3_to_f32((u8)i) : (mode[1] == 'b' ? bf16_to_f32((u16)i) : f16_to_f32((u16)i));
      u32 u = dl_f2u(f);
      fwrite(&u, 4, 1, out);
    }
  } else {
    FILE* in = fopen(argv[2], "rb");
    float f;
    while (fread(&f, 4, 1, in) == 1) {
      u32 code;
      if (mode[1] == '8') code = f32_to_e4m3(f);
      else if (mode[1] == '2') code = f32_to_e2m1(f);
      else if (mode[1] == 'b') code = f32_to_bf16(f);
      else code = f32_to_f16(f);
      fwrite(&code, 4, 1, out);
    }
    fclose(in);
  }
  fclose(out);
  return 0;
}
"""


@pytest.fixture(scope="session")
def host_conv(tmp_path_factory) -> Path:
    nvcc = _nvcc()
    d = tmp_path_factory.mktemp("hostconv")
    src = d / "conv.cu"
    src.write_text(HOST_PROGRAM)
    exe = d / "conv"
    res = subprocess.run(
        [nvcc, "-std=c++17", "-I", str(CUDA_DIR), "-o", str(exe), str(src)], capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return exe


def _run(exe: Path, mode: str, tmp: Path, inputs: torch.Tensor | None = None) -> torch.Tensor:
    fin, fout = tmp / f"{mode}.in", tmp / f"{mode}.out"
    if inputs is not None:
        fin.write_bytes(_f32_bytes(inputs))
    subprocess.run([str(exe), mode, str(fin), str(fout)], check=True, timeout=120)
    data = fout.read_bytes()
    return torch.tensor(struct.unpack(f"<{len(data) // 4}I", data), dtype=torch.int64)


def _f32_bytes(t: torch.Tensor) -> bytes:
    bits = t.float().contiguous().view(torch.int32).tolist()
    return struct.pack(f"<{len(bits)}i", *bits)


def _f32_bits(t: torch.Tensor) -> torch.Tensor:
    return t.float().contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def _probe_floats() -> torch.Tensor:
    """Every fp16 value and its neighbours' midpoints, bf16 midpoints, e4m3 grid and midpoints,
    powers of two across the whole fp32 range, fp32 subnormals, random bit patterns."""
    g = torch.Generator().manual_seed(0)
    h = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16).float()
    h = h[torch.isfinite(h)]
    hs = torch.sort(h.unique()).values
    mids16 = (hs[:-1].double() + hs[1:].double()) / 2
    b = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    b = b[torch.isfinite(b)]
    bs = torch.sort(b.unique()).values
    mids_b = (bs[:-1].double() + bs[1:].double()) / 2
    e = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).float()
    es = torch.sort(e[torch.isfinite(e)].unique()).values
    mids8 = (es[:-1].double() + es[1:].double()) / 2
    pow2 = torch.tensor([2.0**p for p in range(-149, 128)], dtype=torch.float64)
    rnd_bits = torch.randint(-(2**31), 2**31 - 1, (200_000,), generator=g, dtype=torch.int64).to(torch.int32)
    rnd = rnd_bits.view(torch.float32)
    near = torch.randn(100_000, generator=g) * torch.exp2(torch.randint(-12, 10, (100_000,), generator=g).float())
    parts = [h, mids16.float(), b, mids_b.float(), es, mids8.float(), pow2.float(), -pow2.float(), rnd, near,
             torch.tensor([0.0, -0.0, float("inf"), float("-inf"), 448.0, 464.0, 480.0, 65504.0, 65520.0, 1e-40])]
    x = torch.cat([p.float().reshape(-1) for p in parts])
    # nudge midpoints one ulp either side too
    bits = x.view(torch.int32)
    return torch.cat([x, (bits + 1).view(torch.float32), (bits - 1).view(torch.float32)])


@pytest.mark.slow
def test_decoders_match_torch(host_conv: Path, tmp_path: Path) -> None:
    pats16 = torch.arange(65536, dtype=torch.int32).to(torch.int16)
    for mode, want in (
        ("d16", pats16.view(torch.float16).float()),
        ("db16", pats16.view(torch.bfloat16).float()),
        ("d8", torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).float()),
    ):
        got = _run(host_conv, mode, tmp_path)
        w = _f32_bits(want)
        nan = torch.isnan(want)
        got_f = got.to(torch.int32).view(torch.float32)
        assert torch.equal(torch.isnan(got_f), nan), mode
        assert torch.equal(got[~nan], w[~nan]), f"{mode}: {(got[~nan] != w[~nan]).sum()} patterns differ"


@pytest.mark.slow
def test_encoders_match_torch(host_conv: Path, tmp_path: Path) -> None:
    x = _probe_floats()
    finite = torch.isfinite(x)
    # fp16 and bf16: torch's round-to-nearest-even casts over everything, NaN aside.
    for mode, dtype in (("e16", torch.float16), ("eb16", torch.bfloat16)):
        got = _run(host_conv, mode, tmp_path, x)
        want = x.to(dtype).view(torch.int16).to(torch.int64) & 0xFFFF
        nan = torch.isnan(x)
        assert torch.equal(got[~nan], want[~nan]), f"{mode}: {(got[~nan] != want[~nan]).sum()} inputs differ"
        assert bool(((got[nan] & 0x7C00 if dtype == torch.float16 else got[nan] & 0x7F80) != 0).all())
    # e4m3: callers clamp to +-448 first (spec section 1), so compare on clamped finite inputs.
    xc = x[finite].clamp(-448.0, 448.0)
    got = _run(host_conv, "e8", tmp_path, xc)
    want = xc.to(torch.float8_e4m3fn).view(torch.uint8).to(torch.int64)
    assert torch.equal(got, want), f"e4m3: {(got != want).sum()} inputs differ"
    # e2m1: the reference's threshold encoder over clamped values.
    from dtype_lint.kernels_ref.formats import e2m1_encode

    x6 = torch.cat([x[finite].clamp(-6.0, 6.0), torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -5.0, -0.0])])
    got = _run(host_conv, "e2", tmp_path, x6)
    assert torch.equal(got, e2m1_encode(x6).to(torch.int64)), "e2m1 codes differ"


def test_nvrtc_is_looked_up_in_the_wheels_then_the_system(tmp_path, monkeypatch) -> None:
    """The GPU image has NVRTC from a CUDA wheel (torch's dependencies) or a system CUDA: both are
    found, the wheel first, and the builtins library is never taken for NVRTC itself."""
    wheel = tmp_path / "site" / "nvidia" / "cu13" / "lib"
    wheel.mkdir(parents=True)
    for name in ("libnvrtc.so.13", "libnvrtc-builtins.so.13.0", "libnvrtc.alt.so.13"):
        (wheel / name).write_text("")
    cuda_home = tmp_path / "cuda-13.0"
    (cuda_home / "lib64").mkdir(parents=True)
    (cuda_home / "lib64" / "libnvrtc.so.13.0.88").write_text("")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")] + sys.path)
    monkeypatch.setenv("CUDA_HOME", str(cuda_home))
    monkeypatch.delenv("DTYPE_LINT_NVRTC", raising=False)
    cands = build._nvrtc_candidates()
    assert cands.index(str(wheel / "libnvrtc.so.13")) < cands.index(str(cuda_home / "lib64" / "libnvrtc.so.13.0.88"))
    assert not any("builtins" in c or ".alt." in c for c in cands)
    monkeypatch.setenv("DTYPE_LINT_NVRTC", "/opt/x/libnvrtc.so")
    assert build._nvrtc_candidates()[0] == "/opt/x/libnvrtc.so"
