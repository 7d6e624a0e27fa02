"""Run the CUDA kernels of ``kernels_ref/cuda`` on the CPU, to test them without a GPU.

Each ``.cu`` file (with its headers spliced in, exactly the text NVRTC compiles) is built by g++
into a shared library, behind a small prelude that maps CUDA's vocabulary onto the host:

* a block's threads are cooperative threads on one OS thread (own stacks, switched with
  ``_setjmp``/``_longjmp``), swept in order; ``__syncthreads()`` yields to the sweep, so each sweep
  is one barrier phase. With ``check_orders`` (the default) every launch runs twice, sweeping the
  threads first to last and last to first, from the same inputs, and the two results must be equal
  bit for bit: a result that depends on the order of the threads within one phase is a missing or
  misplaced barrier (:class:`ThreadOrderRace`);
  ``__shfl_xor_sync`` exchanges through a per-block array between two barriers (the kernels only
  shuffle with every thread of the block taking part, which this requires);
* blocks run one after another, so ``__shared__`` can be ``static``;
* ``__fmul_rn``/``__fadd_rn``/``__fdiv_rn``/``__fmaf_rn`` are the IEEE host operations (no
  contraction: ``-ffp-contract=off``), ``expf``/``logf`` the C library's.

A launcher per kernel is generated from its parsed parameter list, and :func:`launch` has the
signature of ``kernels_ref.build.launch``, so the ops' CUDA wrappers can run unchanged on CPU
tensors (their ``data_ptr()`` is a host address). What this cannot show: NVRTC- or
CuPy-specific behaviour, warp-synchronous hazards, and the device's expf/logf last-bit differences.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from dtype_lint.kernels_ref import build

PRELUDE = r"""
#include <ucontext.h>
#include <setjmp.h>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

struct emu_dim3 { unsigned x = 1, y = 1, z = 1; };
namespace emu {
// Cooperative threads on one OS thread: each CUDA thread runs on its own stack; the scheduler
// sweeps the block's threads, each running until its next __syncthreads() (or its end), so every
// sweep is one barrier phase. A thread is entered once in the process's life with swapcontext (to
// get onto its stack) and switched afterwards with _setjmp/_longjmp, which, unlike swapcontext,
// make no system call.
// `reverse` sweeps the threads last to first: a kernel whose result depends on the order in which
// the threads of one phase run (a missing barrier) gives different results in the two orders.
struct Thread { ucontext_t ctx; jmp_buf jb; emu_dim3 tid; bool started = false, done = false; };
struct State {
  ucontext_t boot;
  jmp_buf sched;
  std::vector<Thread> th;  // persistent: a thread that finished a block waits for the next one
  std::vector<std::unique_ptr<char[]>> stacks;
  unsigned cur = 0;
  std::vector<float> ex_f;
  const std::function<void()>* fn = nullptr;
  bool reverse = false;
};
inline State S;
inline emu_dim3 bIdx, bDim, gDim;
constexpr size_t kStack = 256 * 1024;

// A thread's whole life: run the current kernel body for its block, report done, wait to be
// resumed for the next block (of this launch or a later one). Entered once, with swapcontext.
inline void trampoline() {
  for (;;) {
    (*S.fn)();
    Thread& th = S.th[S.cur];
    th.done = true;
    if (!_setjmp(th.jb)) _longjmp(S.sched, 1);
  }
}

inline void yield() {
  if (!_setjmp(S.th[S.cur].jb)) _longjmp(S.sched, 1);
}

inline void run(emu_dim3 grid, unsigned threads, const std::function<void()>& fn) {
  S.fn = &fn;
  while (S.th.size() < threads) {
    S.th.emplace_back();
    S.stacks.emplace_back(new char[kStack]);
  }
  S.ex_f.assign(threads, 0.0f);
  bDim = {threads, 1, 1};
  gDim = grid;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        bIdx = {x, y, z};
        for (unsigned t = 0; t < threads; ++t) {
          S.th[t].tid = {t, 0, 0};
          S.th[t].done = false;
        }
        for (;;) {
          bool any = false;
          for (unsigned i = 0; i < threads; ++i) {
            unsigned t = S.reverse ? threads - 1 - i : i;
            Thread& th = S.th[t];
            if (th.done) continue;
            any = true;
            S.cur = t;
            if (!_setjmp(S.sched)) {
              if (!th.started) {
                th.started = true;
                getcontext(&th.ctx);
                th.ctx.uc_stack.ss_sp = S.stacks[t].get();
                th.ctx.uc_stack.ss_size = kStack;
                th.ctx.uc_link = nullptr;
                makecontext(&th.ctx, trampoline, 0);
                swapcontext(&S.boot, &th.ctx);
              } else {
                _longjmp(th.jb, 1);
              }
            }
          }
          if (!any) break;
        }
      }
}
}  // namespace emu

extern "C" void emu_set_reverse(int r) { emu::S.reverse = r != 0; }

#define threadIdx (emu::S.th[emu::S.cur].tid)
#define blockIdx emu::bIdx
#define blockDim emu::bDim
#define gridDim emu::gDim
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __shared__ static
#define __launch_bounds__(...)
inline void __syncthreads() { emu::yield(); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __shfl_xor_sync(unsigned, float v, int off) {
  unsigned t = emu::S.cur;
  emu::S.ex_f[t] = v;
  __syncthreads();
  float r = emu::S.ex_f[t ^ (unsigned)off];
  __syncthreads();
  return r;
}
"""

_PARAM_CTYPES = {"p": ctypes.c_void_p, "i": ctypes.c_int, "I": ctypes.c_uint, "l": ctypes.c_longlong, "f": ctypes.c_float}
_KERNEL_DECL_RE = re.compile(
    r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(([^)]*)\)', re.S
)


def gxx() -> str | None:
    return shutil.which("g++")


def _launchers(source_path: Path) -> str:
    text = re.sub(r"//[^\n]*", "", source_path.read_text())
    out = []
    for name, params in _KERNEL_DECL_RE.findall(text):
        decls = [" ".join(p.split()) for p in params.split(",") if p.strip()]
        names = [re.findall(r"\w+", d)[-1] for d in decls]
        out.append(
            f'extern "C" void emu_{name}(unsigned gx, unsigned gy, unsigned gz, unsigned bx'
            + "".join(f", {d}" for d in decls)
            + f") {{ emu::run({{gx, gy, gz}}, bx, [=] {{ {name}({', '.join(names)}); }}); }}"
        )
    return "\n".join(out)


class ThreadOrderRace(AssertionError):
    """A kernel gave different results with its threads swept in forward and in reverse order."""


class Emulator:
    """Compiled emulation libraries, one per ``.cu`` file, built on first use."""

    def __init__(self, cache_dir: Path | None = None, *, check_orders: bool = True) -> None:
        self.dir = Path(cache_dir or tempfile.mkdtemp(prefix="dtl_simt_"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.libs: dict[str, ctypes.CDLL] = {}
        self.sigs = build.all_kernel_signatures()
        self.calls: list[str] = []
        self.history: set[str] = set()
        self.check_orders = check_orders

    def _lib(self, stem: str) -> ctypes.CDLL:
        if stem in self.libs:
            return self.libs[stem]
        cu = build.CUDA_DIR / f"{stem}.cu"
        code = PRELUDE + "\n" + build.kernel_source(cu) + "\n" + _launchers(cu) + "\n"
        digest = hashlib.sha256(code.encode()).hexdigest()[:16]
        so = self.dir / f"{stem}-{digest}.so"
        if not so.exists():
            # Built under a private name and renamed: parallel runs (scripts/mutate.py) share the cache.
            src = self.dir / f"{stem}-{digest}.{os.getpid()}.cpp"
            tmp = self.dir / f"{stem}-{digest}.{os.getpid()}.so"
            src.write_text(code)
            res = subprocess.run(
                [gxx(), "-std=c++20", "-O1", "-ffp-contract=off", "-fno-fast-math", "-shared", "-fPIC",
                 # _longjmp onto another stack is what the scheduler does; fortified longjmp refuses it.
                 "-U_FORTIFY_SOURCE", "-D_FORTIFY_SOURCE=0", "-w", "-o", str(tmp), str(src)],
                capture_output=True, text=True, timeout=600,
            )
            if res.returncode:
                raise RuntimeError(f"g++ failed on the emulation of {stem}.cu:\n{res.stderr[-4000:]}")
            os.replace(tmp, so)
            src.unlink(missing_ok=True)
        lib = ctypes.CDLL(str(so))
        self.libs[stem] = lib
        return lib

    def build_all(self) -> None:
        for f in build.cuda_files():
            self._lib(f.stem)

    def launch(self, name, grid, block, args, *, device=None, shared_mem: int = 0) -> None:
        """Same contract as ``kernels_ref.build.launch``, on CPU tensors."""
        stem, sig = self.sigs[name]
        if len(args) != len(sig):
            raise TypeError(f"{name} takes {len(sig)} arguments ({sig}), got {len(args)}")
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        if any(g <= 0 for g in grid):
            return
        fn = getattr(self._lib(stem), f"emu_{name}")
        fn.restype = None
        fn.argtypes = [ctypes.c_uint] * 4 + [_PARAM_CTYPES[k] for k in sig]
        cargs = []
        for kind, value in zip(sig, args):
            if kind == "p":
                if isinstance(value, torch.Tensor):
                    if value.device.type != "cpu":
                        raise ValueError(f"{name}: the emulator needs CPU tensors")
                    cargs.append(ctypes.c_void_p(value.data_ptr()))
                else:
                    cargs.append(ctypes.c_void_p(0 if value is None else int(value)))
            else:
                cargs.append(_PARAM_CTYPES[kind](value))
        self.calls.append(name)
        if not self.check_orders:
            fn(*grid, int(block[0]), *cargs)
            return
        tensors = [v for k, v in zip(sig, args) if k == "p" and isinstance(v, torch.Tensor)]
        before = [t.clone() for t in tensors]
        fn(*grid, int(block[0]), *cargs)
        forward = [t.clone() for t in tensors]
        for t, b in zip(tensors, before):
            t.copy_(b)
        set_reverse = self._lib(stem).emu_set_reverse
        set_reverse(1)
        try:
            fn(*grid, int(block[0]), *cargs)
        finally:
            set_reverse(0)
        for i, (t, f) in enumerate(zip(tensors, forward)):
            if not torch.equal(_bits(t), _bits(f)):
                raise ThreadOrderRace(
                    f"{name}: argument {i} differs between forward and reverse thread order "
                    f"({int((_bits(t) != _bits(f)).sum())} of {t.numel()} elements): a barrier is missing"
                )


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def patch_ops(monkeypatch, emulator: Emulator) -> None:
    """Make ``kernels_ref.ops`` run its CUDA wrappers on CPU tensors through ``emulator``."""
    from dtype_lint.kernels_ref import ops

    monkeypatch.setattr(ops, "launch", emulator.launch)

    def use_cuda(op, backend, tensors, unsupported=None):
        if backend not in ops.BACKENDS:
            raise ValueError(f"backend must be one of {ops.BACKENDS}, got {backend!r}")
        if backend == "auto":
            backend = ops.default_backend()
        if backend == "torch":
            return False
        if unsupported is not None:
            if backend == "cuda":
                raise RuntimeError(unsupported)
            return False
        return True

    monkeypatch.setattr(ops, "_use_cuda", use_cuda)
