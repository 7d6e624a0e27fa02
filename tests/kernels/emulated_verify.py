"""``dtype-lint verify``'s matrix with every kernel call on the emulated CUDA kernels.

The CUDA kernels (``kernels_ref/cuda/*.cu``, the text NVRTC compiles) built by g++ behind the
SIMT prelude of :mod:`simt_emulator` and run on CPU tensors, with the thread-order check on by
default (a missing barrier raises in the launch, and the variant that launched it fails). This
is how ``scripts/mutate.py`` runs verify on a mutant of a ``.cu`` file, a mutant of a format that
writer and reader share (the kernel reads the real layout), or any mutant that names
``verify = "emulated"``; ``tests/kernels/test_cuda_emulated.py`` runs the same matrix as a test.

    python tests/kernels/emulated_verify.py --scenarios B --backends marlin,awq --json out.json

Writes verify's JSON report (``violations``, ``violations_by_check``, ``runtime_violations``);
exit 0 when every check holds, 1 on a violation, 2 when it could not run (no g++).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from simt_emulator import Emulator, gxx, patch_ops  # noqa: E402


class _Setattr:
    """The one method of pytest's monkeypatch that :func:`simt_emulator.patch_ops` calls."""

    def setattr(self, target, name, value) -> None:
        setattr(target, name, value)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", default="B")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--backends", default="", help="comma list (default: every row)")
    ap.add_argument("--upstream", action="store_true", help="also vLLM's own functions (needs the trees)")
    ap.add_argument("--no-orders", action="store_true", help="skip the thread-order check (half the time)")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "dtype_lint_simt_cache"))
    ap.add_argument("--json", help="write the report here")
    args = ap.parse_args(argv)
    if gxx() is None:
        print("emulated_verify: g++ not found", file=sys.stderr)
        return 2
    from dtype_lint.kernels_ref import ops
    from dtype_lint.kernels_ref.harness import verify

    emulator = Emulator(Path(args.cache), check_orders=not args.no_orders)
    patch_ops(_Setattr(), emulator)
    backends = [b for b in args.backends.split(",") if b] or None
    with ops.installed("cuda"):
        report = verify.run_matrix("cpu", [s for s in args.scenarios.split(",") if s],
                                   [int(s) for s in args.seeds.split(",") if s], backends=backends,
                                   upstream=args.upstream)
    report["emulated_kernels"] = sorted(set(emulator.calls))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"emulated verify: {'ok' if report['ok'] else str(len(report['violations'])) + ' violation(s)'}; "
          f"kernels launched: {', '.join(report['emulated_kernels'])}")
    for v in report["violations"][:20]:
        print(f"  - {v}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
