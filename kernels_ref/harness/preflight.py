"""What the GPU check finds on its machine and what it will run, checked before any device work.

Device time is short (15 minutes a task, each start costing minutes), so ``gpu_check`` first
looks, prints and stops early on anything that would kill the run later:

* **versions**: the device image is Python 3.12 with torch 2.11 (CUDA 13), CuPy, NVRTC, numpy,
  rich and no libcst. The code must run there and on the newer torch of this machine, so the
  check is a floor (:data:`MINIMUM`), not a pin, plus :func:`torch_probes`: every torch feature the
  harness leans on whose absence or change would not show until mid-run (the float8 dtype and its
  round-to-nearest-even cast, bit views, seeded generators, the functions the reference and the
  metrics call), each run once on the CPU, and on the device for the ones that touch it;
* **what verify needs**: the fixer's output either saved by ``dtype-lint verify --emit-variants``
  (checked here exactly as verify will load it: every sha256, ``pre.py`` against the current
  fixture, the imports) or made here, which needs libcst. Neither: the run stops here, before
  the build, with the command that makes them;
* **the plan**: steps, scenarios, backends, seeds, the time budget and the kill timeout.

Nothing here imports libcst, the engine's fixer or anything beyond the standard library, torch
and the harness; :func:`report` never raises (a failed look is a failed check).
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

#: The device image, as this workplace describes it (docs/kernels.md, "The GPU check").
IMAGE = {"python": "3.12", "torch": "2.11"}
#: What the harness needs at least: Python for the syntax and stdlib it uses, torch for the
#: float8 dtypes (2.1) and the rest of :func:`torch_probes`.
MINIMUM = {"python": (3, 10), "torch": (2, 1)}


@dataclass
class Preflight:
    found: dict[str, str] = field(default_factory=dict)
    checks: list[dict] = field(default_factory=list)
    plan: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c["ok"] for c in self.checks)

    def check(self, name: str, fn: Callable[[], object]) -> bool:
        try:
            detail = fn()
            ok = detail is not False
            detail = "" if detail in (None, True, False) else str(detail)
        except Exception as exc:  # noqa: BLE001 - a failed look is a failed check
            ok, detail = False, f"{type(exc).__name__}: {exc}"
        self.checks.append({"name": name, "ok": ok, "detail": detail})
        return ok

    def to_json(self) -> dict:
        return {"ok": self.ok, "found": self.found, "checks": self.checks, "plan": self.plan, "notes": self.notes}


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
        if not piece.isdigit():
            break
    return tuple(parts)


def _module_version(name: str) -> str:
    try:
        module = importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001
        return f"absent ({type(exc).__name__})"
    version = getattr(module, "__version__", None)
    if version is None:
        try:
            from importlib.metadata import version as dist_version

            version = dist_version(name)
        except Exception:  # noqa: BLE001 - imported, but no distribution metadata
            version = "present"
    return str(version)


def torch_probes(device: str) -> dict[str, Callable[[], object]]:
    """Each probe returns False or raises when the feature is missing or behaves otherwise."""
    import torch

    fp8 = torch.float8_e4m3fn

    def fp8_rne():
        # 0.3 -> 0x2A, the largest finite 448 -> 0x7E, the smallest sub-normal -> 0x81, and a tie
        # (1.0625 * 2^-4, halfway between two codes) rounded to even -> 0x18.
        x = torch.tensor([0.3, 448.0, -0.001953125, 0.06640625]).to(fp8)
        got = x.view(torch.uint8).tolist()
        return got == [42, 126, 129, 24] or f"bits {got}"

    def bit_views():
        ok = torch.tensor([1.0, -2.5]).to(torch.bfloat16).view(torch.int16).tolist() == [16256, -16352]
        ok &= torch.tensor([1.0]).view(torch.int32).tolist() == [1065353216]
        ok &= torch.tensor([1.0]).half().view(torch.int16).tolist() == [15360]
        return ok

    def seeded():
        a = torch.randn(4, generator=torch.Generator().manual_seed(7))
        b = torch.randn(4, generator=torch.Generator().manual_seed(7))
        p = torch.randperm(9, generator=torch.Generator().manual_seed(7))
        return torch.equal(a, b) and sorted(p.tolist()) == list(range(9))

    def reference_ops():
        x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        torch.linalg.vector_norm(x)
        torch.logsumexp(x, dim=-1)
        torch.einsum("thd,shd->hts", x, x)
        torch.nn.functional.pad(x, (0, 3))
        torch.repeat_interleave(torch.arange(3), torch.tensor([1, 0, 2]))
        torch.where(torch.isinf(x), torch.full_like(x, float("-inf")), x)
        return True

    probes = {"float8_e4m3fn round-to-nearest-even": fp8_rne, "bit views (bf16/fp16/fp32)": bit_views,
              "seeded CPU generators": seeded, "reference ops (norm, logsumexp, einsum, pad)": reference_ops}
    if device.startswith("cuda"):
        def on_device():
            y = torch.tensor([0.3, 448.0], device=device).to(fp8)
            bits = y.view(torch.uint8).cpu().tolist()
            torch.cuda.synchronize()
            return bits == [42, 126] or f"bits {bits} on {device}"

        probes["float8 on the device"] = on_device
    return probes


def report(*, device: str, variants_dir: str | None, verify: bool, plan: dict) -> Preflight:
    """Look at the machine and what the run needs; ``ok`` False means: do not start."""
    pf = Preflight(plan=dict(plan))
    pf.found["python"] = f"{platform.python_version()} ({sys.executable})"
    pf.check(f"Python >= {'.'.join(map(str, MINIMUM['python']))}", lambda: sys.version_info[:2] >= MINIMUM["python"])
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        pf.found["torch"] = f"absent ({type(exc).__name__}: {exc})"
        pf.check("torch importable", lambda: False)
        return pf
    pf.found["torch"] = f"{torch.__version__} (CUDA {torch.version.cuda}, {Path(torch.__file__).parent})"
    pf.check(f"torch >= {'.'.join(map(str, MINIMUM['torch']))}",
             lambda: _version_tuple(torch.__version__)[:2] >= MINIMUM["torch"] or torch.__version__)
    for name in ("numpy", "rich", "cupy", "libcst"):
        pf.found[name] = _module_version(name)
    for key, want in IMAGE.items():
        have = platform.python_version() if key == "python" else torch.__version__
        if _version_tuple(have)[:2] != _version_tuple(want)[:2]:
            pf.notes.append(f"{key} {have} is not the device image's {want}: the floor and the probes are what is checked")
    if device.startswith("cuda"):
        pf.check("torch.cuda.is_available()", lambda: torch.cuda.is_available())
        if torch.cuda.is_available():
            pf.found["device"] = f"{torch.cuda.get_device_name()} (sm_{''.join(map(str, torch.cuda.get_device_capability()))})"
        pf.check("NVRTC loads", _nvrtc)
    else:
        pf.found["device"] = "cpu (dry run: the PyTorch ops stand in for the CUDA kernels, nothing is compiled)"
    for name, probe in torch_probes(device if device.startswith("cuda") and torch.cuda.is_available() else "cpu").items():
        pf.check(f"torch: {name}", probe)
    if verify:
        _check_sources(pf, variants_dir)
    return pf


def _nvrtc() -> str:
    from dtype_lint.kernels_ref import build

    lib = build.Nvrtc()
    return f"{lib.path} (NVRTC {'.'.join(map(str, lib.version()))})"


def _check_sources(pf: Preflight, variants_dir: str | None) -> None:
    """What verify will execute, loaded and checked now as it will be then."""
    from . import variants

    libcst = not pf.found.get("libcst", "absent").startswith("absent")
    if variants_dir is None:
        pf.found["variants"] = "none given"
        if libcst:
            pf.notes.append("no saved variants: the fixer runs here (libcst is present)")
            return
        def missing():
            raise FileNotFoundError("no saved variants and no libcst here: run `dtype-lint verify --emit-variants "
                                    ".dtl_variants` where libcst and the vLLM trees are, and carry .dtl_variants")

        pf.check("the fixer's output is available", missing)
        return
    notes: list[str] = []

    def load():
        src = variants.sources(variants_dir=variants_dir, upstream=False)
        notes.extend(src.notes)
        assert src.fixture is not None  # (saved variants always hold the fixture)
        return f"fixture package {src.fixture.name}: pre.py is the current fixture, every sha256 matches"

    pf.found["variants"] = str(Path(variants_dir).resolve())
    pf.check(f"saved variants load ({variants_dir})", load)

    def load_upstream():
        up = variants.load_upstream(variants_dir, notes)
        if up is None:
            return "fixture only (emitted with --no-upstream): vLLM's own functions will not run"
        return "vLLM " + ", ".join(up.releases) + ": every extracted name resolves"

    pf.check("saved vLLM functions load", load_upstream)
    pf.notes.extend(notes)


def render(pf: Preflight) -> str:
    """The lines printed before any device work."""
    lines = ["gpu_check preflight: found"]
    lines += [f"  {k:8} {v}" for k, v in pf.found.items()]
    lines.append("checks")
    lines += [f"  {'ok  ' if c['ok'] else 'FAIL'} {c['name']}" + (f": {c['detail']}" if c["detail"] else "") for c in pf.checks]
    if pf.notes:
        lines.append("notes")
        lines += [f"  {n}" for n in pf.notes]
    lines.append("will run")
    for k, v in pf.plan.items():
        lines.append(f"  {k:16} {v}")
    lines.append("preflight: " + ("ok, starting" if pf.ok else "FAILED, nothing was run on the device"))
    return "\n".join(lines)


def kill_timeout_s() -> float | None:
    """The kill timeout ``scripts/gpu_check.sh`` set (``GPU_CHECK_TIMEOUT``), for the plan."""
    try:
        return float(os.environ["GPU_CHECK_TIMEOUT"])
    except (KeyError, ValueError):
        return None
