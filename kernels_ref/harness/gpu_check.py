"""The one-shot GPU check: build, cross-check, verify, report.

Run on the GPU machine as a module, with the package importable (installed, or through
``scripts/pkgroot.py`` as ``scripts/gpu_check.sh`` does; no libcst needed there)::

    python3 -m dtype_lint.kernels_ref.harness.gpu_check --out "$OUT"     # or: bash scripts/gpu_check.sh

Steps, each recorded in ``<out>/gpu_check.json`` as soon as it finishes (so a run stopped by
its time limit still leaves what it did), each followed by a device synchronisation so that an
asynchronous CUDA error is charged to the step that caused it:

1. **build**: NVRTC-compile every ``kernels_ref/cuda/*.cu`` for the device (:mod:`kernels_ref.build`).
2. **kernel checks**: every CUDA op against the PyTorch reference on the same inputs, at the
   kernel-check sizes of ``docs/kernels.md`` (GEMMs M=4096, K=512, N=4096; attention T=960):
   bit-exact for quantizer codes and scales, pack/repack and dequantization;
   ``|Δ| ≤ 2^-m|ref| + 1e-4·max|ref|`` (m=7 bf16, 10 fp16) for GEMM/attention/merge outputs;
   ``|Δ| ≤ 1e-4 + 1e-5|lse|`` for LSEs; and the error contract (same exception type and message
   from both implementations).
3. **verify**: the harness's ``run_matrix`` at G1/G2 on the device, once with the PyTorch ops and
   once with the CUDA kernels routed in (:func:`kernels_ref.ops.installed`); with ``--variants DIR``
   (saved by ``dtype-lint verify --emit-variants DIR`` on a machine with libcst and the vLLM trees)
   also vLLM's own prefill functions. A step that cannot import or find what it needs is recorded
   as a failure, not a crash. ``--budget-s`` stops starting verify passes once spent, so the whole
   script fits the device tool's limit; skipped passes are recorded as skipped.

``--device cpu`` (alias ``--dry-run``) runs the very same steps on the CPU with the PyTorch ops
standing in for the CUDA ones (the "build" step only parses the kernel signatures), so the script's
logic is tested without a GPU (``tests/kernels/test_gpu_check_cpu.py``). ``--sizes tiny`` shrinks
the kernel checks; ``--scenarios`` picks verify scenarios (default G1,G2 on cuda, A on cpu).

Exit status: 0 when every step passed, 1 when any failed or was skipped, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dtype_lint.core.writer import write_atomic

from . import preflight

#: The CUDA-kernel verify passes run these backends by default: between them every kernel and
#: every attention input dtype (fp16 unquantized, fp8 quant+mm with fp8 q/k/v, Marlin with bf16,
#: NVFP4, AWQ). Naive SIMT kernels make the full matrix at G1 take minutes (about 100 GFLOP per
#: run, dozens of runs); the PyTorch-op passes always run the whole matrix.
CUDA_VERIFY_BACKENDS = ("fp16", "fp8_p", "marlin", "nvfp4", "awq")
#: No verify pass starts after this many seconds; scripts/gpu_check.sh kills the run at
#: KILL_TIMEOUT_S (its GPU_CHECK_TIMEOUT default), and the device tool's call gets
#: DEVICE_TIMEOUT_S. A start (a few minutes) plus two runs fit in 15 minutes of device time.
DEFAULT_BUDGET_S = 150.0
KILL_TIMEOUT_S = 240
DEVICE_TIMEOUT_S = 270
#: The device command, exactly as docs/kernels.md gives it (the CPU dry run appends --device cpu).
DEVICE_COMMAND = "bash scripts/gpu_check.sh"
DEVICE_CARRY = (".dtl_variants",)


def _synchronize(device: str) -> None:
    """Wait for the device, so that an asynchronous kernel error surfaces in this step."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


# ----------------------------------------------------------------------------- comparison


def _mantissa_bits(dtype) -> int:
    import torch

    return {torch.bfloat16: 7, torch.float16: 10}.get(dtype, 20)


def compare_exact(got, ref) -> dict:
    """Bit-for-bit comparison (shape, dtype and every bit pattern)."""
    import torch

    if got.shape != ref.shape or got.dtype != ref.dtype:
        return {"ok": False, "detail": f"shape/dtype {tuple(got.shape)} {got.dtype} vs {tuple(ref.shape)} {ref.dtype}"}
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[got.element_size()]
    g = got.contiguous().view(as_int)
    r = ref.contiguous().view(as_int)
    bad = int((g != r).sum())
    return {"ok": bad == 0, "mismatches": bad, "numel": got.numel()}


def compare_close(got, ref, *, what: str = "out") -> dict:
    """``|Δ| ≤ 2^-m|ref| + 1e-4·max|ref|`` on finite entries; NaN/±inf must sit in the same places."""
    import torch

    if got.shape != ref.shape or got.dtype != ref.dtype:
        return {"ok": False, "detail": f"shape/dtype {tuple(got.shape)} {got.dtype} vs {tuple(ref.shape)} {ref.dtype}"}
    m = _mantissa_bits(ref.dtype)
    g, r = got.double(), ref.double()
    fin = torch.isfinite(r)
    same_special = bool(torch.equal(torch.isnan(g), torch.isnan(r))) and bool(
        torch.equal(torch.where(fin, torch.zeros_like(r), r.nan_to_num(0.0)), torch.where(fin, torch.zeros_like(g), g.nan_to_num(0.0)))
    )
    gf, rf = g[fin], r[fin]
    if rf.numel() == 0:
        return {"ok": same_special, "max_ratio": 0.0, "finite": 0, "specials_match": same_special}
    if not bool(torch.isfinite(gf).all()):
        return {"ok": False, "detail": f"{what}: non-finite where the reference is finite", "specials_match": same_special}
    amax = float(rf.abs().max())
    bound = rf.abs() * 2.0**-m + 1e-4 * amax
    err = (gf - rf).abs()
    ratio = err / bound.clamp_min(1e-300)
    i = int(ratio.argmax())
    return {
        "ok": same_special and float(ratio[i]) <= 1.0,
        "max_ratio": float(ratio[i]),
        "max_abs_err": float(err.max()),
        "bound_at_worst": float(bound[i]),
        "rule": f"|d| <= 2^-{m}|ref| + 1e-4*max|ref| (max|ref|={amax:.3g})",
        "specials_match": same_special,
    }


def compare_lse(got, ref) -> dict:
    """``|Δ| ≤ 1e-4 + 1e-5|lse|`` on finite entries; infinities must match exactly."""
    import torch

    if got.shape != ref.shape:
        return {"ok": False, "detail": f"shape {tuple(got.shape)} vs {tuple(ref.shape)}"}
    g, r = got.double(), ref.double()
    fin = torch.isfinite(r)
    specials = bool(torch.equal(torch.isnan(g), torch.isnan(r))) and bool(torch.equal(g[torch.isinf(r)], r[torch.isinf(r)]))
    if int(fin.sum()) == 0:
        return {"ok": specials, "max_ratio": 0.0, "specials_match": specials}
    err = (g[fin] - r[fin]).abs()
    bound = 1e-4 + 1e-5 * r[fin].abs()
    if not bool(torch.isfinite(g[fin]).all()):
        return {"ok": False, "detail": "lse: non-finite where the reference is finite", "specials_match": specials}
    ratio = err / bound
    return {
        "ok": specials and float(ratio.max()) <= 1.0,
        "max_ratio": float(ratio.max()),
        "max_abs_err": float(err.max()),
        "rule": "|d| <= 1e-4 + 1e-5|lse|",
        "specials_match": specials,
    }


def _merge(name: str, parts: dict[str, dict]) -> dict:
    ratios = [p.get("max_ratio", 0.0) for p in parts.values() if "max_ratio" in p]
    return {
        "ok": all(p["ok"] for p in parts.values()),
        "max_ratio": max(ratios) if ratios else None,
        "parts": parts,
    }


# ----------------------------------------------------------------------------- kernel checks


@dataclass(frozen=True)
class Sizes:
    m: int
    k: int
    n: int
    heads: int
    d_qk: int
    d_v: int
    cu_q: tuple[int, ...]
    cu_k_ctx: tuple[int, ...]  # context attention keys per request (one G1 chunk)


SIZES = {
    # The GPU kernel checks: GEMMs 4096x512x4096; attention T=960 over G1's first chunk (mcc 1344).
    "gpu": Sizes(4096, 512, 4096, 16, 192, 128, (0, 512, 768, 896, 960), (0, 1344, 2688, 3712, 3712)),
    # The same shapes in miniature, for the CPU emulation of the CUDA kernels: K=256 (two g128
    # groups), N=320 (three 128-column GEMM tiles, a partial one last), M=130 (two row tiles),
    # d_qk=192 (three 64-wide chunks), d_v=128, a request of 35 queries (two 32-row tiles) over 70
    # keys (three 32-key tiles), requests with no keys and with no queries.
    "emulated": Sizes(130, 256, 320, 2, 192, 128, (0, 5, 40, 41, 41, 76), (0, 70, 70, 140, 141, 141)),
    "tiny": Sizes(96, 128, 128, 2, 96, 64, (0, 5, 12, 16, 20), (0, 40, 60, 60, 93)),
}


class KernelChecks:
    """Each check runs one op on both implementations over the same inputs."""

    def __init__(self, device: str, candidate: str, sizes: Sizes, seed: int = 0) -> None:
        import torch

        self.torch = torch
        self.device = device
        self.candidate = candidate  # "cuda" on the GPU, "torch" in the CPU dry run
        self.s = sizes
        self.gen = torch.Generator().manual_seed(seed)

    def randn(self, *shape, dtype=None, scale: float = 1.0):
        t = self.torch.randn(*shape, generator=self.gen) * scale
        return (t if dtype is None else t.to(dtype)).to(self.device)

    def both(self, fn: Callable):
        """``(candidate result, reference result)`` of ``fn(backend)``."""
        got = fn(self.candidate)
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize()
        return got, fn("torch")

    # -- Marlin
    def marlin(self) -> dict[str, dict]:
        from dtype_lint.kernels_ref import marlin_fp8 as mf
        from dtype_lint.kernels_ref import ops

        torch, s = self.torch, self.s
        out = {}
        # Every finite e4m3 code (sub-normals, both signs) for pack and repack.
        raw = torch.randint(0, 256, (s.k, s.n), generator=self.gen, dtype=torch.int64)
        raw = torch.where((raw & 0x7F) == 0x7F, raw & 0x80, raw).to(torch.uint8).to(self.device)
        codes = raw.view(torch.float8_e4m3fn)
        q_c, q_r = self.both(lambda b: ops.pack_fp8_to_int32(codes, backend=b))
        out["marlin.pack_fp8_to_int32"] = compare_exact(q_c, q_r)
        rp_c, rp_r = self.both(lambda b: ops.marlin_repack_fp8(q_r, s.k, s.n, backend=b))
        out["marlin.repack"] = compare_exact(rp_c, rp_r)
        for dtype, gs in ((torch.bfloat16, None), (torch.bfloat16, 128), (torch.float16, None)):
            tag = f"{str(dtype)[6:]}/g{gs or 'ch'}"
            w = self.randn(s.n, s.k, scale=s.k**-0.5)
            layer = mf.MarlinFp8Linear(w.cpu(), dtype, group_size=gs).to(self.device)
            d_c, d_r = self.both(
                lambda b: ops.marlin_dequantize_fp8(layer.weight, layer.weight_scale, s.k, s.n, dtype, backend=b)
            )
            out[f"marlin.dequant[{tag}]"] = compare_exact(d_c, d_r)
            a = self.randn(s.m, s.k, dtype=dtype)
            y_c, y_r = self.both(lambda b: ops.marlin_gemm(a, layer.weight, layer.weight_scale, s.m, s.n, s.k, backend=b))
            out[f"marlin.gemm[{tag}]"] = compare_close(y_c, y_r)
        return out

    # -- native FP8
    def fp8(self) -> dict[str, dict]:
        from dtype_lint.kernels_ref import fp8_linear as fl
        from dtype_lint.kernels_ref import ops

        torch, s = self.torch, self.s
        out = {}
        for dtype in (torch.bfloat16, torch.float16):
            x = self.randn(s.m, s.k, dtype=dtype, scale=3.0)
            x[0].zero_()  # the min-scale clamp
            (qc, sc), (qr, sr) = self.both(lambda b: ops.fp8_quant_per_token(x, backend=b))
            out[f"fp8.quant_per_token[{str(dtype)[6:]}]"] = _merge("q", {"codes": compare_exact(qc, qr), "scales": compare_exact(sc, sr)})
        for per_channel in (True, False):
            layer = fl.Fp8Linear(self.randn(s.n, s.k, scale=s.k**-0.5).cpu(), torch.bfloat16, per_channel=per_channel).to(self.device)
            xq, xs = fl.fp8_quant_per_token(self.randn(s.m, s.k, dtype=torch.bfloat16))
            y_c, y_r = self.both(lambda b: ops.fp8_scaled_mm(xq, layer.weight, xs, layer.weight_scale, torch.bfloat16, backend=b))
            out[f"fp8.scaled_mm[{'channel' if per_channel else 'tensor'}]"] = compare_close(y_c, y_r)
        return out

    # -- NVFP4
    def nvfp4(self) -> dict[str, dict]:
        from dtype_lint.kernels_ref import nvfp4 as nv
        from dtype_lint.kernels_ref import ops

        torch, s = self.torch, self.s
        out = {}
        layer = nv.NvFp4Linear(self.randn(s.n, s.k, scale=s.k**-0.5).cpu(), torch.bfloat16, input_amax=4.0).to(self.device)
        for dtype in (torch.bfloat16, torch.float16):
            x = self.randn(s.m, s.k, dtype=dtype)
            x[0, :16] = 0  # an all-zero block: sf 0, osc 0
            (pc, fc), (pr, fr) = self.both(lambda b: ops.scaled_fp4_quant(x, layer.input_global_scale_inv, backend=b))
            out[f"nvfp4.quant[{str(dtype)[6:]}]"] = _merge("q", {"codes": compare_exact(pc, pr), "scales": compare_exact(fc, fr)})
            y_c, y_r = self.both(lambda b: ops.nvfp4_mm(pr, fr, layer.weight, layer.weight_scale, layer.alpha, dtype, backend=b))
            out[f"nvfp4.mm[{str(dtype)[6:]}]"] = compare_close(y_c, y_r)
        return out

    # -- unquantized and AWQ
    def linear(self) -> dict[str, dict]:
        from dtype_lint.kernels_ref import linear_basic as lb
        from dtype_lint.kernels_ref import ops

        torch, s = self.torch, self.s
        out = {}
        for dtype in (torch.bfloat16, torch.float16):
            w = self.randn(s.n, s.k, dtype=dtype, scale=s.k**-0.5)
            x = self.randn(s.m, s.k, dtype=dtype)
            y_c, y_r = self.both(lambda b: ops.unquantized_linear(x, w, backend=b))
            out[f"unquantized.linear[{str(dtype)[6:]}]"] = compare_close(y_c, y_r)
        awq = lb.AwqLikeLinear(self.randn(s.n, s.k, scale=s.k**-0.5).cpu(), torch.bfloat16).to(self.device)
        d_c, d_r = self.both(lambda b: ops.awq_dequantize(awq.qweight, awq.qzeros, awq.scales, awq.group_size, backend=b))
        out["awq.dequant[bfloat16]"] = compare_exact(d_c, d_r)
        x = self.randn(s.m, s.k, dtype=torch.bfloat16)
        y_c, y_r = self.both(lambda b: ops.awq_gemm(x, awq.qweight, awq.qzeros, awq.scales, awq.group_size, backend=b))
        out["awq.gemm[bfloat16]"] = compare_close(y_c, y_r)
        return out

    # -- attention, mask, merge
    def attention(self) -> dict[str, dict]:
        from dtype_lint.kernels_ref import ops

        torch, s = self.torch, self.s
        fp8 = torch.float8_e4m3fn
        out = {}
        t = s.cu_q[-1]
        scale = s.d_qk**-0.5
        cases = (
            # (label, in dtype, out dtype, keys cu, causal, empty)
            ("ctx/bf16/fa2", torch.bfloat16, torch.bfloat16, s.cu_k_ctx, False, "fa2"),
            ("ctx/fp16/fa3", torch.float16, torch.float16, s.cu_k_ctx, False, "fa3"),
            ("ctx/fp8->bf16/fa2", fp8, torch.bfloat16, s.cu_k_ctx, False, "fa2"),
            ("suffix/bf16/causal", torch.bfloat16, torch.bfloat16, s.cu_q, True, "fa2"),
        )
        for label, dt, odt, cu_k, causal, empty in cases:
            sk = cu_k[-1]
            q = self.randn(t, s.heads, s.d_qk).clamp(-448, 448).to(dt)
            k = self.randn(sk, s.heads, s.d_qk).clamp(-448, 448).to(dt)
            v = self.randn(sk, s.heads, s.d_v).clamp(-448, 448).to(dt)
            (oc, lc), (orf, lr) = self.both(
                lambda b: ops.mla_prefill_attention(q, k, v, list(s.cu_q), list(cu_k), scale, causal, odt, empty, backend=b)
            )
            out[f"attention[{label}]"] = _merge("a", {"out": compare_close(oc, orf), "lse": compare_lse(lc, lr)})

        # mask_empty_context: requests 1 and 3 have an empty span in this chunk.
        lens = [7, 0, 12, 0, 5, 9][: len(s.cu_q) - 1]
        cu_ctx = [sum(lens[:i]) for i in range(len(lens) + 1)]
        lse0 = self.randn(s.heads, t)
        o0 = self.randn(t, s.heads, s.d_v, dtype=torch.bfloat16)
        res = {}
        for b in (self.candidate, "torch"):
            lse_b, o_b = lse0.clone(), o0.clone()
            ops.mask_empty_context(lse_b, o_b, list(s.cu_q), cu_ctx, backend=b)
            res[b] = (lse_b, o_b)
        (lc, oc), (lr, orf) = res[self.candidate], res["torch"]
        out["attention.mask_empty_context"] = _merge("m", {"lse": compare_exact(lc, lr), "out": compare_exact(oc, orf)})

        # merge_attn_states with FA2 markers (+inf), empty prefixes (-inf), both empty, and ptwc.
        for dt in (torch.bfloat16, torch.float16):
            p_out = self.randn(t, s.heads, s.d_v, dtype=dt)
            s_out = self.randn(t, s.heads, s.d_v, dtype=dt)
            p_lse = self.randn(s.heads, t, scale=3.0)
            s_lse = self.randn(s.heads, t, scale=3.0)
            # FA2's empty marker (+inf) on either side, -inf on either side, and both empty.
            p_lse[:, 0] = float("inf")
            p_lse[:, 1] = float("-inf")
            p_lse[:, 2] = float("-inf")
            s_lse[:, 2] = float("-inf")
            s_lse[:, 3] = float("inf")
            p_lse[:, 4] = float("inf")
            s_lse[:, 4] = float("inf")
            p_lse[:, 5] = float("-inf")
            s_lse[:, 5] = float("inf")
            ptwc = t - min(3, t // 4)
            res = {}
            for b in (self.candidate, "torch"):
                o = torch.empty_like(p_out)
                ol = torch.empty_like(p_lse)
                ops.merge_attn_states(o, p_out, p_lse, s_out, s_lse, ol, ptwc, backend=b)
                res[b] = (o, ol)
            (oc, lc), (orf, lr) = res[self.candidate], res["torch"]
            out[f"attention.merge[{str(dt)[6:]}]"] = _merge("g", {"out": compare_close(oc, orf), "lse": compare_lse(lc, lr)})
        return out

    # -- error contract: same exception type and message from both implementations
    def contract(self) -> dict[str, dict]:
        from dtype_lint.kernels_ref import marlin_fp8 as mf
        from dtype_lint.kernels_ref import ops

        torch = self.torch
        layer = mf.MarlinFp8Linear(torch.randn(64, 128, generator=self.gen), torch.bfloat16).to(self.device)
        a = self.randn(4, 128, dtype=torch.bfloat16)
        fp8 = torch.float8_e4m3fn
        calls = {
            "marlin_gemm(a int32)": lambda b: ops.marlin_gemm(a.to(torch.int32), layer.weight, layer.weight_scale, 4, 64, 128, backend=b),
            "marlin_gemm(a fp32)": lambda b: ops.marlin_gemm(a.float(), layer.weight, layer.weight_scale, 4, 64, 128, backend=b),
            "marlin_gemm(a fp8)": lambda b: ops.marlin_gemm(a.to(fp8), layer.weight, layer.weight_scale, 4, 64, 128, backend=b),
            "marlin_gemm(scales fp32, reference-only)": lambda b: ops.marlin_gemm(a, layer.weight, layer.weight_scale.float(), 4, 64, 128, backend=b),
            "marlin_gemm(size_m)": lambda b: ops.marlin_gemm(a, layer.weight, layer.weight_scale, 5, 64, 128, backend=b),
            "fp8_scaled_mm(bf16 a)": lambda b: ops.fp8_scaled_mm(a, a.t().to(fp8), a[:, 0].float(), a[0].float(), torch.bfloat16, backend=b),
            "scaled_fp4_quant(fp32)": lambda b: ops.scaled_fp4_quant(a.float(), 1.0, backend=b),
            "attention(dtype mix)": lambda b: ops.mla_prefill_attention(
                a.view(4, 1, 128), a.view(4, 1, 128).half(), a.view(4, 1, 128), [0, 4], [0, 4], 0.1, False, torch.bfloat16, backend=b
            ),
            "merge(output_scale)": lambda b: ops.merge_attn_states(
                a.view(4, 1, 128), a.view(4, 1, 128), a.new_zeros(1, 4).float(), a.view(4, 1, 128), a.new_zeros(1, 4).float(),
                output_scale=a.new_ones(1).float(), backend=b,
            ),
        }
        out = {}
        for name, call in calls.items():
            got = {}
            for b in (self.candidate, "torch"):
                try:
                    call(b)
                    got[b] = ("no error", "")
                except Exception as error:  # noqa: BLE001 - the exception is the result
                    got[b] = (type(error).__name__, str(error))
            ok = got[self.candidate] == got["torch"] and got["torch"][0] != "no error"
            out[f"contract.{name}"] = {"ok": ok, "torch": list(got["torch"]), self.candidate: list(got[self.candidate])}
        return out


# ----------------------------------------------------------------------------- report


class Report:
    def __init__(self, out_dir: Path | None, args: argparse.Namespace) -> None:
        self.out_dir = out_dir
        self.path = out_dir / "gpu_check.json" if out_dir else None
        self.t0 = time.perf_counter()
        self.data: dict = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "argv": sys.argv[1:],
            "mode": args.device,
            "sizes": args.sizes,
            "environment": {},
            "steps": [],
            "ok": False,
        }

    def add(self, step: dict) -> dict:
        step.setdefault("seconds", None)
        self.data["steps"].append(step)
        self.write()
        return step

    def write(self) -> None:
        self.data["elapsed_s"] = round(time.perf_counter() - self.t0, 3)
        self.data["ok"] = bool(self.data["steps"]) and all(s["status"] == "pass" for s in self.data["steps"])
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, (json.dumps(self.data, indent=2, default=str, allow_nan=True) + "\n").encode())


def _environment(device: str) -> dict:
    import platform

    import torch

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "device": device,
    }
    if device.startswith("cuda"):
        env["device_name"] = torch.cuda.get_device_name()
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
        try:
            import cupy

            env["cupy"] = cupy.__version__
        except Exception as error:  # noqa: BLE001
            env["cupy"] = f"unavailable: {error}"
    else:
        env["device_name"] = "cpu (dry run: PyTorch ops stand in for CUDA)"
    return env


def _run_step(report: Report, name: str, fn: Callable[[], dict], *, kind: str, device: str = "cpu") -> dict:
    started = time.perf_counter()
    try:
        result = fn()
        _synchronize(device)
        status = "pass" if result.get("ok") else "fail"
    except Exception as error:  # noqa: BLE001 - a failing step is recorded, the script goes on
        result = {"ok": False, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc(limit=8)}
        status = "fail"
    return report.add({"name": name, "kind": kind, "status": status, "seconds": round(time.perf_counter() - started, 3), **result})


def step_build(device: str) -> dict:
    from dtype_lint.kernels_ref import build

    sigs = build.all_kernel_signatures()
    if not device.startswith("cuda"):
        return {"ok": True, "kernels": sorted(sigs), "note": "dry run: signatures parsed, nothing compiled"}
    info = build.build_all(0)
    return {
        "ok": not info.ftz_forced,
        "kernels": sorted(sigs),
        "arch": info.arch,
        "nvrtc": f"{info.nvrtc_version} {info.nvrtc_path}",
        "options": list(info.options),
        "ftz_forced": info.ftz_forced,
        "modules": info.modules,
    }


def step_verify(device: str, scenario: str, seeds: list[int], implementation: str, backends: list[str] | None,
                variants_dir: str | None = None, upstream: bool = False) -> dict:
    try:
        verify = importlib.import_module("dtype_lint.kernels_ref.harness.verify")
    except Exception as error:  # noqa: BLE001 - e.g. an import error on an unexpected image
        return {"ok": False, "error": f"verify is not importable: {type(error).__name__}: {error}"}
    from dtype_lint.kernels_ref import ops

    def run():
        return verify.run_matrix(device, [scenario], seeds, backends=backends, variants_dir=variants_dir, upstream=upstream)

    if implementation == "torch":
        with ops.use_backend("torch"):
            rep = run()
    else:
        with ops.installed("cuda" if device.startswith("cuda") else "torch"):
            rep = run()
    return {
        "ok": bool(rep.get("ok")),
        "violations": rep.get("violations", [])[:40],
        "verify_elapsed_s": rep.get("elapsed_s"),
        "upstream": bool(rep.get("upstream")),
        "summary": rep.get("summary", {}),
        "crash_sets": rep.get("crash_sets"),
    }


def upstream_available(variants_dir: str | None) -> tuple[bool, str]:
    """Whether vLLM's own functions can run here, and why (never fetches: no network on the GPU)."""
    from dtype_lint.kernels_ref.harness import variants

    if variants_dir:
        meta = json.loads((Path(variants_dir) / "variants.json").read_text())
        if meta.get("upstream"):
            return True, f"saved in {variants_dir}"
        return False, f"{variants_dir} holds the fixture only (emitted with --no-upstream)"
    if variants._trees_cached():
        return True, "cached vLLM trees"
    return False, "no --variants with vLLM's functions and no cached vLLM trees"


def run(args: argparse.Namespace) -> int:
    out_dir = Path(args.out) if args.out else None
    report = Report(out_dir, args)
    import dtype_lint

    how = str(Path(dtype_lint.__file__).parent)

    device = "cuda" if args.device == "cuda" else "cpu"
    scenarios = args.scenarios or (["G1", "G2"] if device == "cuda" else ["A"])
    # Before any device work: what is here, what verify will execute, what will run.
    pf = preflight.report(device=device, variants_dir=args.variants, verify=not args.skip_verify,
                          plan=_plan(args, device, scenarios))
    print(preflight.render(pf), flush=True)
    report.data["preflight"] = pf.to_json()
    try:
        import torch
    except ImportError as exc:
        report.add({"name": "preflight", "kind": "setup", "status": "fail", "error": f"torch is not importable: {exc}"})
        _print(report)
        return 2
    if device == "cuda" and not torch.cuda.is_available():
        report.data["environment"] = {**_environment("cpu"), "device": "cuda", "device_name": "none", "import": how}
        report.add({"name": "device", "kind": "setup", "status": "fail", "error": "torch.cuda.is_available() is False"})
        _print(report)
        return 1
    report.data["environment"] = {**_environment(device), "import": how}
    if not pf.ok:
        failed = "; ".join(f"{c['name']}: {c['detail']}" for c in pf.checks if not c["ok"])
        report.add({"name": "preflight", "kind": "setup", "status": "fail", "error": failed})
        _print(report)
        return 2
    report.add({"name": "preflight", "kind": "setup", "status": "pass", "checks": len(pf.checks)})
    if args.preflight_only:
        _print(report)
        return 0

    build_step = _run_step(report, "build", lambda: step_build(device), kind="build", device=device)
    candidate = "cuda" if device == "cuda" else "torch"
    if build_step["status"] == "pass" or device == "cpu":
        kc = KernelChecks(device, candidate, SIZES[args.sizes], seed=args.seed)
        for group in ("marlin", "fp8", "nvfp4", "linear", "attention", "contract"):
            started = time.perf_counter()
            try:
                results = getattr(kc, group)()
                _synchronize(device)
            except Exception as error:  # noqa: BLE001
                results = {f"{group}.*": {"ok": False, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc(limit=8)}}
            for name, res in results.items():
                report.add({"name": name, "kind": "kernel", "status": "pass" if res.get("ok") else "fail",
                            "seconds": round(time.perf_counter() - started, 3), **res})
                started = time.perf_counter()
    else:
        report.add({"name": "kernel checks", "kind": "kernel", "status": "fail", "error": "skipped: build failed"})

    if not args.skip_verify:
        try:
            upstream, why = upstream_available(args.variants)
        except (OSError, ValueError) as error:
            upstream, why = False, f"{args.variants}: {error}"
        report.data["upstream"] = why
        if not upstream:
            report.add({"name": "vLLM's own functions", "kind": "verify", "status": "fail",
                        "error": f"not run: {why} (run `dtype-lint verify --emit-variants .dtl_variants` where the "
                        "trees and libcst are, and carry it)"})
        # Cheapest first: the PyTorch-op passes, then the CUDA-kernel passes smallest scenario first.
        passes = [("torch", s) for s in reversed(scenarios)] + [("cuda", s) for s in reversed(scenarios)]
        for impl, scen in passes:
            name = f"verify[{scen}/{'torch ops' if impl == 'torch' else 'CUDA kernels'}]"
            if time.perf_counter() - report.t0 > args.budget_s:
                report.add({"name": name, "kind": "verify", "status": "skipped", "error": f"time budget of {args.budget_s} s spent"})
                continue
            backends = args.cuda_backends if impl == "cuda" else None
            _run_step(report, name, lambda: step_verify(device, scen, args.seeds, impl, backends, args.variants, upstream),
                      kind="verify", device=device)
    report.write()
    _print(report)
    return 0 if report.data["ok"] else 1


def _plan(args: argparse.Namespace, device: str, scenarios: list[str]) -> dict:
    """What the run will do, in the order it does it (printed by the preflight)."""
    cuda_backends = ",".join(args.cuda_backends) if args.cuda_backends else "all rows"
    passes = [f"{s}/torch ops (all rows)" for s in reversed(scenarios)]
    passes += [f"{s}/{'CUDA kernels' if device == 'cuda' else 'ops.installed(torch)'} ({cuda_backends})" for s in reversed(scenarios)]
    kill = preflight.kill_timeout_s()
    return {
        "device": device,
        "build": "NVRTC, every kernels_ref/cuda/*.cu" if device == "cuda" else "signatures parsed only",
        "kernel checks": f"sizes {args.sizes} ({SIZES[args.sizes]})",
        "verify passes": "none (--skip-verify)" if args.skip_verify else "; ".join(passes),
        "seeds": ",".join(map(str, args.seeds)),
        "variants": args.variants or "none (the fixer runs here)",
        "time": f"no verify pass starts after {args.budget_s:.0f} s"
                + (f"; killed at {kill:.0f} s (GPU_CHECK_TIMEOUT)" if kill else ""),
        "report": f"{args.out}/gpu_check.json" if args.out else "(no --out: printed only)",
    }


def _fmt_ratio(step: dict) -> str:
    r = step.get("max_ratio")
    if r is None:
        if "mismatches" in step:
            return f"{step['mismatches']} bits off"
        parts = step.get("parts")
        if parts:
            return ", ".join(f"{k}: {_fmt_ratio(v)}" for k, v in parts.items())
        return ""
    return f"{r:.3g} of bound" if math.isfinite(r) else str(r)


def _print(report: Report) -> None:
    data = report.data
    try:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table
    except Exception:  # pragma: no cover - rich is on both machines
        for s in data["steps"]:
            print(f"{s['status']:7} {s['name']}  {_fmt_ratio(s)}  {s.get('error', '')}")
        print("gpu_check:", "PASS" if data["ok"] else "FAIL")
        return
    console = Console(width=160)
    env = data["environment"]
    table = Table(title=f"gpu_check {data['date']} on {env.get('device_name', '?')} (torch {env.get('torch')}, CUDA {env.get('torch_cuda')})")
    for col in ("step", "kind", "status", "error vs bound / detail", "s"):
        table.add_column(col)
    colors = {"pass": "green", "fail": "red", "skipped": "yellow"}
    for s in data["steps"]:
        detail = s.get("error") or _fmt_ratio(s)
        if s.get("violations"):
            detail = f"{len(s['violations'])} violation(s): {s['violations'][0]}"
        table.add_row(escape(s["name"]), s["kind"], f"[{colors.get(s['status'], 'white')}]{s['status']}[/]", escape(str(detail)[:90]),
                      "" if s.get("seconds") is None else f"{s['seconds']:.1f}")
    console.print(table)
    verdict = "[green]PASS[/]" if data["ok"] else "[red]FAIL[/]"
    where = f" -> {report.path}" if report.path else ""
    console.print(f"gpu_check: {verdict} in {data['elapsed_s']:.1f} s{where}")


def _list(text: str) -> list[str]:
    return [p for p in text.split(",") if p]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT"), help="directory for gpu_check.json (default $OUT)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--dry-run", action="store_const", const="cpu", dest="device", help="same as --device cpu")
    p.add_argument("--sizes", choices=sorted(SIZES), default=None, help="kernel-check sizes (default gpu on cuda, tiny on cpu)")
    p.add_argument("--scenarios", type=_list, default=None, help="verify scenarios (default G1,G2 on cuda, A on cpu)")
    p.add_argument("--seeds", type=lambda t: [int(x) for x in _list(t)], default=[0])
    p.add_argument(
        "--cuda-backends", type=_list, default=None,
        help="backends for the CUDA-kernel verify passes; default on cuda: "
        f"{','.join(CUDA_VERIFY_BACKENDS)} (every kernel and input dtype, about half the matrix's time), "
        "'all' for the whole matrix; default on cpu: all",
    )
    p.add_argument("--skip-verify", action="store_true")
    p.add_argument("--preflight-only", action="store_true",
                   help="print what was found and what would run, check the saved variants, and stop")
    p.add_argument("--seed", type=int, default=0, help="seed of the kernel-check inputs")
    p.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                   help=f"start no verify pass after this many seconds (default {DEFAULT_BUDGET_S:.0f}: with the "
                   f"{KILL_TIMEOUT_S} s kill in scripts/gpu_check.sh a run and its rerun fit, with a machine start, "
                   "in 15 minutes of device time)")
    p.add_argument("--variants", default=None, help="what `dtype-lint verify --emit-variants` saved (the fixer's output "
                   "and vLLM's functions, for a machine without libcst or the vLLM trees)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.sizes is None:
        args.sizes = "gpu" if args.device == "cuda" else "tiny"
    if args.cuda_backends is None:
        args.cuda_backends = list(CUDA_VERIFY_BACKENDS) if args.device == "cuda" else None
    elif args.cuda_backends == ["all"]:
        args.cuda_backends = None
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
