"""Build and launch the CUDA reference kernels (``kernels_ref/cuda/*.cu``) with NVRTC.

Why NVRTC and not ``torch.utils.cpp_extension.load_inline``: the GPU machine has minutes of device time per task; NVRTC compiles all of ``cuda/`` in seconds, a torch
extension takes minutes. The ``.cu`` files therefore include no torch or CUDA headers and
export ``extern "C" __global__`` kernels; every dtype/shape check lives in the Python wrappers of
:mod:`kernels_ref.ops`, which launch through :func:`launch` on torch's current stream.

How a kernel gets to the GPU:

1. :func:`kernel_source` splices ``#include "x.cuh"`` textually (so a header edit changes the
   cache key, and NVRTC needs no include path).
2. :func:`compile_source` calls ``libnvrtc`` directly through :mod:`ctypes` and returns a cubin
   for the device's ``sm_XY``. We do not use ``cupy.RawModule(code=...)``: CuPy appends
   ``-ftz=true`` after the caller's options, and flushing fp32 subnormals to zero would break the
   bit-exact quantizer checks. Options: :data:`NVRTC_OPTIONS` (``--fmad=false`` keeps
   ``a*b+c`` from being contracted, so the device rounds as the PyTorch reference does).
3. The cubin is written under ``kernels_ref/.build/`` (git-ignored; reused while the machine is
   warm) and loaded with ``cupy.RawModule(path=...)``; kernels are called with ``numpy`` scalars
   typed from the parsed kernel signature (:func:`kernel_signatures`), pointers as ``uint64``.

If ``libnvrtc`` cannot be found, :func:`load_module` falls back to ``cupy.RawModule(code=...)``
and records ``ftz_forced=True`` in :func:`build_info` (the kernels avoid fp32 subnormal
intermediates where the reference relies on them, so this is a degraded mode, not a broken one).

This module imports on machines without CUDA: ``cupy`` and ``numpy`` are imported lazily, and
everything above the NVRTC call (sources, signatures, options) is plain Python.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import hashlib
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from dtype_lint.core.writer import write_atomic

CUDA_DIR = Path(__file__).resolve().parent / "cuda"
#: Where cubins are cached: ``kernels_ref/.build`` (git-ignored) in a checkout, else a temp dir.
BUILD_DIR = Path(os.environ.get("DTYPE_LINT_KERNEL_BUILD_DIR", Path(__file__).resolve().parent / ".build"))


def _build_dir() -> Path:
    global BUILD_DIR
    try:
        BUILD_DIR.mkdir(parents=True, exist_ok=True)
        if not os.access(BUILD_DIR, os.W_OK):
            raise PermissionError(BUILD_DIR)
    except OSError:  # e.g. a read-only site-packages
        import tempfile

        BUILD_DIR = Path(tempfile.gettempdir()) / "dtype_lint_kernels"
        BUILD_DIR.mkdir(parents=True, exist_ok=True)
    return BUILD_DIR

#: Options every module is compiled with (the architecture is added per device).
NVRTC_OPTIONS = (
    "-std=c++17",
    "--fmad=false",
    "--ftz=false",
    "--prec-div=true",
    "--prec-sqrt=true",
)

#: Dtype codes shared with ``cuda/common.cuh`` (``DT_*``); keyed by the dtype's name so this
#: module needs no torch import.
DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 2, "float8_e4m3fn": 3}

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.M)
_KERNEL_RE = re.compile(
    r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(([^)]*)\)',
    re.S,
)


class CudaUnavailable(RuntimeError):
    """The CUDA path cannot run here (no CUDA device, no CuPy, or no NVRTC)."""


# ----------------------------------------------------------------------------- sources


def cuda_files() -> list[Path]:
    """The kernel translation units, one per kernel family (``cuda/*.cu``)."""
    return sorted(CUDA_DIR.glob("*.cu"))


def kernel_source(path: Path | str) -> str:
    """The ``.cu`` file with its local ``#include "x.cuh"`` lines spliced in, once each."""
    seen: set[Path] = set()

    def splice(p: Path) -> str:
        text = p.read_text()

        def repl(m: re.Match) -> str:
            inc = (p.parent / m.group(1)).resolve()
            if inc in seen:
                return f"// (already included: {m.group(1)})"
            seen.add(inc)
            return f"// ---- begin {m.group(1)}\n{splice(inc)}\n// ---- end {m.group(1)}"

        text = re.sub(r"^\s*#\s*pragma\s+once\s*$", "", text, flags=re.M)
        return _INCLUDE_RE.sub(repl, text)

    return splice(Path(path).resolve())


def _param_kind(decl: str) -> str:
    """'p' pointer, 'i' int, 'l' 64-bit int, 'f' float for one C parameter declaration."""
    decl = " ".join(decl.replace("__restrict__", "").split())
    if "*" in decl:
        return "p"
    words = decl.split()
    ctype = " ".join(w for w in words[:-1] if w != "const")
    kinds = {"int": "i", "i64": "l", "long long": "l", "float": "f", "u32": "I", "unsigned int": "I"}
    if ctype not in kinds:
        raise ValueError(f"unsupported kernel parameter type in {decl!r}")
    return kinds[ctype]


def kernel_signatures(path: Path | str) -> dict[str, str]:
    """``{kernel name: parameter kinds}`` of every ``extern "C" __global__`` kernel in a file."""
    text = re.sub(r"//[^\n]*", "", Path(path).read_text())
    sigs = {}
    for name, params in _KERNEL_RE.findall(text):
        params = params.strip()
        sigs[name] = "".join(_param_kind(p) for p in params.split(",")) if params else ""
    return sigs


def all_kernel_signatures() -> dict[str, tuple[str, str]]:
    """``{kernel name: (module stem, parameter kinds)}`` over every ``.cu`` file."""
    out: dict[str, tuple[str, str]] = {}
    for f in cuda_files():
        for name, sig in kernel_signatures(f).items():
            if name in out:
                raise ValueError(f"kernel {name} defined in both {out[name][0]} and {f.stem}")
            out[name] = (f.stem, sig)
    return out


# ----------------------------------------------------------------------------- NVRTC via ctypes


def _nvrtc_candidates() -> list[str]:
    cands: list[str] = []
    env = os.environ.get("DTYPE_LINT_NVRTC")
    if env:
        cands.append(env)
    # pip wheels (nvidia-cuda-nvrtc): nvidia/cu13/lib for CUDA 13, nvidia/cuda_nvrtc/lib for 12.
    for base in sys.path:
        for pattern in ("nvidia/cu13/lib/libnvrtc.so*", "nvidia/cuda_nvrtc/lib/libnvrtc.so*"):
            cands.extend(sorted(glob.glob(os.path.join(base, pattern)), reverse=True))
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    homes += sorted(glob.glob("/usr/local/cuda-*"), reverse=True)  # versioned installs, newest first
    for home in homes:
        if home:
            for sub in ("lib64", "lib", os.path.join("targets", "x86_64-linux", "lib")):
                cands.extend(sorted(glob.glob(os.path.join(home, sub, "libnvrtc.so*")), reverse=True))
    found = ctypes.util.find_library("nvrtc")
    if found:
        cands.append(found)
    cands += ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
    # Skip the builtins and the "alt" (static-libstdc++) variant names matched by the globs.
    return [c for c in cands if "builtins" not in os.path.basename(c) and ".alt." not in c]


class Nvrtc:
    """Just enough of the NVRTC C API: create, compile, get the log and the cubin/PTX."""

    def __init__(self, lib_path: str | None = None) -> None:
        errors = []
        lib: ctypes.CDLL | None = None
        for cand in [lib_path] if lib_path else _nvrtc_candidates():
            try:
                # libnvrtc dlopen()s libnvrtc-builtins by soname at compile time; a wheel's copy
                # sits beside it but not on the loader's path, so load it first, globally.
                for b in sorted(glob.glob(os.path.join(os.path.dirname(cand), "libnvrtc-builtins.so*"))):
                    if ".alt." not in b:
                        ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
                lib = ctypes.CDLL(cand)
                self.path = cand
                break
            except OSError as error:
                errors.append(f"{cand}: {error}")
        if lib is None:
            raise CudaUnavailable("libnvrtc not found; tried:\n  " + "\n  ".join(errors[:12]))
        self.lib: ctypes.CDLL = lib
        L = self.lib
        L.nvrtcGetErrorString.restype = ctypes.c_char_p
        L.nvrtcCreateProgram.argtypes = [
            ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_char_p,
            ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
        ]
        L.nvrtcCompileProgram.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        for symbol in ("nvrtcGetProgramLogSize", "nvrtcGetCUBINSize", "nvrtcGetPTXSize"):
            getattr(L, symbol).argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
        for symbol in ("nvrtcGetProgramLog", "nvrtcGetCUBIN", "nvrtcGetPTX"):
            getattr(L, symbol).argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        L.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p)]

    def version(self) -> tuple[int, int]:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        return major.value, minor.value

    def _check(self, status: int, what: str, log: str = "") -> None:
        if status != 0:
            msg = self.lib.nvrtcGetErrorString(status).decode()
            raise RuntimeError(f"{what} failed: {msg} ({status})" + (f"\n{log}" if log else ""))

    def _get(self, prog, size_fn: str, get_fn: str) -> bytes:
        size = ctypes.c_size_t()
        self._check(getattr(self.lib, size_fn)(prog, ctypes.byref(size)), size_fn)
        buf = ctypes.create_string_buffer(size.value)
        self._check(getattr(self.lib, get_fn)(prog, buf), get_fn)
        return buf.raw[: size.value]

    def compile(self, source: str, name: str, options: tuple[str, ...]) -> tuple[bytes, str]:
        """Compile to a cubin (``--gpu-architecture=sm_XY``) or PTX (``compute_XY``).

        Returns ``(image, log)``; raises ``RuntimeError`` with the log on a compile error.
        """
        prog = ctypes.c_void_p()
        self._check(
            self.lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
            "nvrtcCreateProgram",
        )
        try:
            opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
            status = self.lib.nvrtcCompileProgram(prog, len(options), opts)
            log = self._get(prog, "nvrtcGetProgramLogSize", "nvrtcGetProgramLog").rstrip(b"\0").decode(
                errors="replace"
            )
            self._check(status, f"NVRTC compile of {name}", log)
            arch = [o for o in options if o.startswith("--gpu-architecture=")]
            if arch and arch[-1].split("=", 1)[1].startswith("sm_"):
                image = self._get(prog, "nvrtcGetCUBINSize", "nvrtcGetCUBIN")
            else:
                image = self._get(prog, "nvrtcGetPTXSize", "nvrtcGetPTX")
            return image, log
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


def nvrtc_options(arch: str) -> tuple[str, ...]:
    """:data:`NVRTC_OPTIONS` plus ``--gpu-architecture=<arch>`` (``sm_90`` → cubin)."""
    return NVRTC_OPTIONS + (f"--gpu-architecture={arch}",)


def compile_source(path: Path | str, arch: str, nvrtc: Nvrtc | None = None) -> tuple[bytes, str]:
    """Compile one ``.cu`` file with NVRTC; returns ``(cubin or PTX, compiler log)``."""
    path = Path(path)
    nvrtc = nvrtc or Nvrtc()
    return nvrtc.compile(kernel_source(path), path.name, nvrtc_options(arch))


# ----------------------------------------------------------------------------- loading and launching


@dataclass
class BuildInfo:
    """What was built, for the GPU check's report."""

    arch: str = ""
    nvrtc_path: str = ""
    nvrtc_version: tuple[int, int] | None = None
    options: tuple[str, ...] = ()
    ftz_forced: bool = False
    modules: dict[str, dict] = field(default_factory=dict)  # stem -> {seconds, cached, log}


_lock = threading.Lock()
_modules: dict[tuple[str, int], object] = {}
_kernels: dict[tuple[str, int], Callable[..., object]] = {}  # cupy kernel functions
_info = BuildInfo()


def build_info() -> BuildInfo:
    return _info


def _device_arch(device_index: int) -> str:
    import torch

    major, minor = torch.cuda.get_device_capability(device_index)
    return f"sm_{major}{minor}"


def cuda_available() -> bool:
    """True when a CUDA device, CuPy and NVRTC (or CuPy's own compiler) can be used."""
    try:
        import torch

        if not torch.cuda.is_available():
            return False
        import cupy  # noqa: F401
        import numpy  # noqa: F401
    except Exception:
        return False
    return True


def load_module(stem: str, device_index: int = 0):
    """The loaded ``cupy.RawModule`` of ``cuda/<stem>.cu`` on a device (compiled once)."""
    key = (stem, device_index)
    with _lock:
        if key in _modules:
            return _modules[key]
        try:
            import cupy
        except Exception as error:  # pragma: no cover - exercised on GPU machines only
            raise CudaUnavailable(f"cupy is not importable: {error}") from error
        import time

        path = CUDA_DIR / f"{stem}.cu"
        arch = _device_arch(device_index)
        opts = nvrtc_options(arch)
        src = kernel_source(path)
        started = time.perf_counter()
        with cupy.cuda.Device(device_index):
            try:
                nv = Nvrtc()
                ver = nv.version()
                digest = hashlib.sha256(repr((src, opts, ver)).encode()).hexdigest()[:24]
                cubin = _build_dir() / f"{stem}-{arch}-{digest}.cubin"
                cached = cubin.exists()
                log = ""
                if not cached:
                    image, log = nv.compile(src, path.name, opts)
                    write_atomic(cubin, image)
                try:
                    mod = cupy.RawModule(path=str(cubin))
                except Exception as error:  # pragma: no cover - a driver that rejects the cubin
                    # Same options, PTX for compute_XY instead: the driver JIT-compiles it.
                    ptx_opts = NVRTC_OPTIONS + (f"--gpu-architecture=compute_{arch[3:]}",)
                    image, log = nv.compile(src, path.name, ptx_opts)
                    ptx = cubin.with_suffix(".ptx")
                    write_atomic(ptx, image.rstrip(b"\0"))
                    mod = cupy.RawModule(path=str(ptx))
                    log = f"cubin load failed ({type(error).__name__}: {error}); loaded PTX instead\n{log}"
                    opts = ptx_opts
                _info.nvrtc_path, _info.nvrtc_version = nv.path, ver
            except CudaUnavailable:
                # Degraded: CuPy's own NVRTC path (it appends -ftz=true; see the module doc).
                mod = cupy.RawModule(code=src, options=NVRTC_OPTIONS)
                cached, log = False, "compiled by cupy.RawModule(code=...): -ftz=true forced"
                _info.ftz_forced = True
        _info.arch, _info.options = arch, opts
        _info.modules[stem] = {"seconds": round(time.perf_counter() - started, 3), "cached": cached, "log": log}
        _modules[key] = mod
        return mod


def build_all(device_index: int = 0) -> BuildInfo:
    """Compile and load every ``cuda/*.cu`` module now (the GPU check's build step)."""
    for f in cuda_files():
        load_module(f.stem, device_index)
    return _info


def _arg(kind: str, value):
    import numpy as np

    if kind == "p":
        if value is None:
            return np.uint64(0)
        if hasattr(value, "data_ptr"):
            return np.uint64(value.data_ptr())
        return np.uint64(int(value))
    if kind == "i":
        v = int(value)
        if not -(2**31) <= v < 2**31:
            raise OverflowError(f"{v} does not fit a kernel int")
        return np.int32(v)
    if kind == "I":
        return np.uint32(int(value))
    if kind == "l":
        return np.int64(int(value))
    if kind == "f":
        return np.float32(value)
    raise ValueError(kind)


def launch(name: str, grid, block, args, *, device, shared_mem: int = 0) -> None:
    """Launch kernel ``name`` on torch's current stream of ``device``.

    ``args`` are Python values in the kernel's parameter order: tensors (or ``None`` for a null
    pointer) for pointers, ints and floats for scalars; their C types come from the parsed
    signature, so a Python int is never silently passed as the wrong width.
    """
    import torch

    sigs = _signatures()
    if name not in sigs:
        raise KeyError(f"no CUDA kernel named {name}")
    stem, sig = sigs[name]
    if len(args) != len(sig):
        raise TypeError(f"{name} takes {len(sig)} arguments ({sig}), got {len(args)}")
    grid = tuple(int(g) for g in grid)
    if any(g <= 0 for g in grid):
        return  # empty problem: nothing to launch
    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    import cupy

    key = (name, index)
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = load_module(stem, index).get_function(name)
        _kernels[key] = kernel
    packed = tuple(_arg(k, v) for k, v in zip(sig, args))
    with cupy.cuda.Device(index):
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream(index).cuda_stream)
        with stream:
            kernel(grid, tuple(int(b) for b in block), packed, shared_mem=shared_mem)


_sig_cache: dict[str, tuple[str, str]] | None = None


def _signatures() -> dict[str, tuple[str, str]]:
    global _sig_cache
    if _sig_cache is None:
        _sig_cache = all_kernel_signatures()
    return _sig_cache


def dtype_code(dtype) -> int:
    """The ``DT_*`` code of a torch dtype; raises ``TypeError`` for unsupported dtypes."""
    name = str(dtype).replace("torch.", "")
    if name not in DTYPE_CODES:
        raise TypeError(f"no CUDA kernel dtype code for {dtype}")
    return DTYPE_CODES[name]


if __name__ == "__main__":  # pragma: no cover - manual use: compile everything for sm_90
    import argparse

    ap = argparse.ArgumentParser(description="Compile kernels_ref/cuda/*.cu with NVRTC (no GPU needed).")
    ap.add_argument("--arch", default="sm_90")
    ns = ap.parse_args()
    nv = Nvrtc()
    print(f"NVRTC {nv.version()} from {nv.path}")
    for f in cuda_files():
        image, log = compile_source(f, ns.arch, nv)
        print(f"{f.name}: {len(image)} bytes" + (f"\n{log}" if log.strip() else ""))
