"""``dtype-lint verify``: prove that the fix changes nothing but the crash, on the fixture and on
vLLM's own MLA prefill (the checks: :mod:`.matrix`; the code it runs: :mod:`.variants`).

Exit 0: every check holds (known failures are reported, not counted); 1: a violation; 2: the
harness itself could not run (bad arguments, no release tree and no network, unusable saved
variants).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from dtype_lint.core.writer import write_atomic

from .backends import BACKENDS
from .matrix import DEFAULT_SCENARIOS, DEFAULT_SEEDS, KERNEL_ROUTES, run_matrix
from .prefill_context import SCENARIOS
from .variants import ReusedFix, VariantsError, write_variants

__all__ = ["build_parser", "main", "render_tables", "run_matrix"]

_SHORT_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8", "int8": "int8", "None": "None"}


def _short(d: str) -> str:
    return _SHORT_DTYPE.get(d, d)


def _outcome_cell(outcomes: list[str], width: int = 44) -> str:
    return "\n".join(o if len(o) <= width else o[: width - 1] + "…" for o in outcomes)


def _err_cell(value, bound: float) -> str:
    return "—" if value is None else f"{value:.2e} / {bound:.1e}"


def _ident_cell(ident: dict[str, bool], names: list[str]) -> str:
    shown = [(k, v) for k, v in ident.items() if any(k.startswith(n + "=") or k.endswith("=" + n) for n in names)]
    if not shown:
        return "n/a"
    bad = [k for k, v in shown if not v]
    return ("NO: " + " ".join(bad)) if bad else "yes: " + " ".join(k.replace("=", "≡") for k, _ in shown)


def render_tables(report: dict, console=None) -> None:
    """The per-row summaries, worst case over every scenario and seed: the fixture, then vLLM."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=None if sys.stdout.isatty() else 180)
    title = (f"device {report['device']} · kernels {report['kernels']} · scenarios {','.join(report['scenarios'])}"
             f" · seeds {','.join(map(str, report['seeds']))}")
    summary = report["summary"]

    if "fixture" in summary:
        t = Table(title=f"dtype-lint verify · fixture (offline) · {title}")
        for col in ("row", "pre", "pre_cp", "post cast", "post rel / bound", "post lse / bound", "bit-identical", ""):
            wraps = col in ("pre", "pre_cp", "bit-identical")
            t.add_column(col, no_wrap=not wraps, min_width=24 if col in ("pre", "pre_cp") else None)
        for b, s in summary["fixture"].items():
            spec = report["backends"][b]
            t.add_row(
                b, _outcome_cell(s["outcomes"]["pre"]), _outcome_cell(s["outcomes"]["pre_cp"]),
                ", ".join(_short(c) for c in s["casts"]["post"]) + (" (known failure)" if s["known_failures"] else ""),
                _err_cell(s["rel_max"]["post"], spec["rel_bound"]), _err_cell(s["lse_max"]["post"], spec["lse_bound"]),
                _ident_cell(s["bit_identical"], ["post", "post_cp", "post_twin", "post_cp_twin"]),
                "[green]✓[/]" if s["ok"] else "[red]✗[/]",
            )
        console.print(t)

    if "vllm" in summary:
        t = Table(title=f"dtype-lint verify · vLLM's own MLA prefill: 0.27.1, 0.27.1 fixed by dtype-lint (ours), 0.28.0 · {title}")
        for col in ("row", "0.27.1 (main / cp)", "ours cast", "ours rel / bound", "0.28.0 (main / cp)", "bit-identical", ""):
            t.add_column(col, no_wrap=col in ("row", "ours cast", "ours rel / bound", ""))
        for b, s in summary["vllm"].items():
            spec = report["backends"][b]
            pre = _outcome_cell(sorted(set(s["outcomes"]["0.27.1"]) | set(s["outcomes"]["0.27.1_cp"])))
            if s["outcomes"]["0.27.1"] != s["outcomes"]["0.27.1_cp"]:
                pre = f"main: {_outcome_cell(s['outcomes']['0.27.1'])}\ncp: {_outcome_cell(s['outcomes']['0.27.1_cp'])}"
            v28 = s["outcomes"]["0.28.0"] if s["outcomes"]["0.28.0"] == s["outcomes"]["0.28.0_cp"] else (
                [f"main: {o}" for o in s["outcomes"]["0.28.0"]] + [f"cp: {o}" for o in s["outcomes"]["0.28.0_cp"]])
            cast28 = ", ".join(_short(c) for c in s["casts"]["0.28.0"])
            rel = max((x for x in (s["rel_max"]["ours"], s["rel_max"]["ours_cp"]) if x is not None), default=None)
            t.add_row(
                b, pre,
                ", ".join(_short(c) for c in s["casts"]["ours"]) + (" (known failure)" if s["known_failures"] else ""),
                _err_cell(rel, spec["rel_bound"]),
                _outcome_cell(v28) + f"\n(cast {cast28})",
                _ident_cell(s["bit_identical"], ["ours", "ours_cp", "ours_twin", "ours_cp_twin", "0.28.0", "0.28.0_cp"])
                + ("".join(f"\n{n}" for n in s["notes"] if "helpers differ" in n)),
                "[green]✓[/]" if s["ok"] else "[red]✗[/]",
            )
        console.print(t)
        up = report["upstream"]
        agree = ", ".join(k for k, v in up["plans_agree"].items() if v) or "none"
        console.print(f"ours ≡ 0.28.0 is compared where both releases cut the context alike ({agree}) and both helpers "
                      "pick one dtype; elsewhere both are held to the bounds.", markup=False)

    known = sorted({(b, kf[0], kf[1]) for src in summary.values() for b, s in src.items() for kf in s["known_failures"]})
    for b, variant, failure in known:
        note = report["backends"][b]["known_failure"]
        console.print(f"known failure: {b} {variant}: {failure} — {note}", markup=False)
    for c in report["negative_control"]:
        found = "raised" if c["nan_tokens"] is None else f"{c['nan_tokens']} token(s) with NaN"
        console.print(f"negative control (scenario {c['scenario']}, seed {c['seed']}, {c['backend']} post, "
                      f"empty-context mask disabled): {found}")
    if report["ok"]:
        console.print(f"[green]verify: all assertions hold[/] ({report['elapsed_s']:.1f} s)")
    else:
        console.print(f"[red]verify: {len(report['violations'])} violation(s)[/]")
        for v in report["violations"]:
            console.print(f"  - {v}", markup=False)


def _int_list(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            low, high = part.split("-")
            out += range(int(low), int(high) + 1)
        elif part:
            out.append(int(part))
    return out


def _str_list(text: str) -> list[str]:
    return [p for p in text.split(",") if p]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dtype-lint verify",
        description="Rewrite the pre-fix MLA prefill with dtype-lint's fixer (our fixture, and vLLM 0.27.1's own "
        "functions) and prove, over the kv_b_proj backend matrix, that the rewrite changes nothing but the crash, "
        "next to vLLM 0.28.0's own fix.",
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--scenarios", type=_str_list, default=list(DEFAULT_SCENARIOS),
                   help=f"comma list of {','.join(SCENARIOS)} (default {','.join(DEFAULT_SCENARIOS)})")
    p.add_argument("--seeds", type=_int_list, default=list(DEFAULT_SEEDS), help="comma list or range, e.g. 0,1 or 0-7 (default 0,1)")
    p.add_argument("--backends", type=_str_list, default=None, help=f"comma list of {','.join(BACKENDS)} (default all)")
    p.add_argument(
        "--kernels", choices=KERNEL_ROUTES, default=None,
        help="how kernels are called: the PyTorch reference directly (default on cpu), or through "
        "kernels_ref.ops with backend auto/torch/cuda (cuda: the CUDA builds; default on --device cuda)",
    )
    p.add_argument("--no-upstream", action="store_true",
                   help="run the fixture only (offline): skip vLLM's own functions, which need the vLLM 0.27.1 and "
                   "0.28.0 trees (fetched once by dtype_lint.releases)")
    p.add_argument("--unsafe-fixes", action="store_true", help="let the fixer apply fixes it marks unsafe")
    p.add_argument("--emit-variants", metavar="DIR",
                   help="only run the fixer and extract vLLM's functions, and save them under DIR (for a machine "
                   "without libcst or the vLLM trees, e.g. the GPU one)")
    p.add_argument("--variants", metavar="DIR", help="use what --emit-variants saved instead of running the fixer")
    p.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    p.add_argument("--no-table", action="store_true", help="do not print the summary tables")
    p.add_argument("--show-diff", action="store_true", help="print the fixer's diffs (fixture, and vLLM 0.27.1)")
    p.add_argument(
        "--matrix-only", action="store_true",
        help="with --device cuda: run only the matrix; by default --device cuda runs the whole GPU check "
        "(harness/gpu_check.py: build the CUDA kernels with NVRTC, cross-check each against the PyTorch "
        "reference, then the matrix at the GPU sizes G1/G2)",
    )
    return p


def main(argv: list[str] | None = None, *, reused: ReusedFix | None = None, fixture: bool = True) -> int:
    """`reused`: for an in-process caller (`migrate --series`'s proof), vLLM 0.27.1's MLA module as
    its migration rewrote it, run instead of the fixer's rewrite; `fixture` False: vLLM's functions
    only, without the fixture's rows (that caller shows no others). No command-line form."""
    args = build_parser().parse_args(argv)
    from dtype_lint.releases import ReleaseFetchError

    if args.emit_variants:
        try:
            out = write_variants(args.emit_variants, unsafe_fixes=args.unsafe_fixes, upstream=not args.no_upstream)
        except (ImportError, ValueError, OSError, ReleaseFetchError) as exc:
            print(f"dtype-lint verify: error: {exc}", file=sys.stderr)
            return 2
        print(f"wrote {out / 'variants.json'}")
        return 0
    if args.device == "cuda" and not args.matrix_only:
        from . import gpu_check

        report_dir = str(Path(args.json).resolve().parent) if args.json else tempfile.mkdtemp(prefix="dtl-gpu-check-")
        print(f"dtype-lint verify: running the full GPU check; report in {report_dir}/gpu_check.json", file=sys.stderr)
        extra = ["--variants", args.variants] if args.variants else []
        return gpu_check.main(["--out", report_dir, "--device", "cuda", *extra])

    def progress(message: str) -> None:
        if sys.stderr.isatty():
            print(f"dtype-lint verify: {message}", file=sys.stderr)

    try:
        report = run_matrix(
            args.device, args.scenarios, args.seeds, backends=args.backends,
            kernels=args.kernels or ("cuda" if args.device == "cuda" else "reference"),
            unsafe_fixes=args.unsafe_fixes, variants_dir=args.variants, upstream=not args.no_upstream,
            progress=progress, reused=reused, fixture=fixture,
        )
    except ReleaseFetchError as exc:
        print(f"dtype-lint verify: error: {exc}\n(--no-upstream runs the fixture alone, offline)", file=sys.stderr)
        return 2
    except (ImportError, ValueError, RuntimeError, OSError, VariantsError) as exc:
        print(f"dtype-lint verify: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        write_atomic(args.json, (json.dumps(report, indent=2) + "\n").encode())
    if args.show_diff:
        print(report["fixer"]["diff"])
        if report["upstream"]:
            print(report["upstream"]["diff"])
    if not args.no_table:
        render_tables(report)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
