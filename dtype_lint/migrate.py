"""`dtype-lint migrate PATH`: helper + every safe fix across a tree + a markdown report for the PR."""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from pathlib import Path

from .apply import HelperError, create_helper, fix_files, locate_helper, write_outcomes
from .engine import Engine
from .findings import Finding


def run_migrate(args) -> int:
    from .cli import EXIT_CLEAN, EXIT_FINDINGS, UserError, load_run_config, progress_callback
    from .discovery import DiscoveryError

    if not Path(args.path).exists():
        raise UserError(f"{args.path}: no such file or directory")
    args.paths = [args.path]
    cfg = load_run_config(args)
    tick, stop = progress_callback(args.no_progress)
    try:
        result = Engine(cfg, jobs=args.jobs, use_cache=False, progress=tick).run([args.path])
        try:
            helper = locate_helper(cfg, result.files)
        except HelperError as e:
            raise UserError(str(e)) from None
        fixable = sorted({f.path for f in result.findings if f.fix and (f.fix.safe or args.unsafe_fixes)})
        jobs = max(1, args.jobs or os.cpu_count() or 1)
        outcomes = fix_files(fixable, result.headers, result.index, cfg, args.unsafe_fixes, jobs, tick)
    except DiscoveryError as e:
        raise UserError(str(e)) from None
    finally:
        stop()
    changed = [o for o in outcomes if o.changed]
    created = False
    if changed and not helper.exists:
        create_helper(helper)
        created = True
    write_outcomes(changed)

    by_path = {o.path: o for o in outcomes}
    fixed: dict[str, list[Finding]] = defaultdict(list)
    left: list[Finding] = []
    for f in result.findings:
        if f.path not in by_path:
            left.append(f)
    for o in outcomes:
        if o.changed:
            fixed[o.path].extend(o.applied)
        left.extend(o.remaining)
    # A site under a suppression comment is not left for a human: someone already decided.
    from .engine import _safe_read
    from .suppressions import apply_suppressions

    left = sorted(apply_suppressions(left, _safe_read)[0], key=Finding.sort_key)
    report = render_report(args.path, helper, created, fixed, left, len(result.files))
    Path(args.report).write_text(report, encoding="utf-8")
    _print_summary(fixed, left, helper, created, args.report)
    return EXIT_FINDINGS if left else EXIT_CLEAN


def _helper_state(helper, created: bool, created_text: str) -> str:
    if created:
        return created_text
    return "existing" if helper.exists else "not created: nothing was fixed"


def _rel(path: str, root: str) -> str:
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return path


def render_report(root: str, helper, created: bool, fixed: dict[str, list[Finding]], left: list[Finding],
                  files: int) -> str:
    n_fixed = sum(len(v) for v in fixed.values())
    lines = [
        "# Route activation casts through one input-dtype helper",
        "",
        "A quantization backend may repack a layer's weight after loading (Marlin FP8 stores it as "
        "`torch.int32`, NVFP4 as `torch.uint8`; AWQ/GPTQ layers have no `.weight`), so casting an "
        "activation to `layer.weight.dtype` crashes or silently mis-casts (vLLM issue #38658). "
        f"This change routes those casts through `{helper.func}`, which decides the input dtype from "
        "the storage format in one place.",
        "",
        f"- Files checked: {files}",
        f"- Sites fixed: {n_fixed} in {len(fixed)} files",
        f"- Sites left: {len(left)}",
        f"- Helper: `{helper.module}:{helper.func}` in `{_rel(str(helper.path), root)}` "
        f"({_helper_state(helper, created, 'created by this migration')})",
        "",
        "## Fixed",
        "",
    ]
    if fixed:
        lines += ["| file | sites | where | fix |", "|---|---|---|---|"]
        for path in sorted(fixed):
            fs = sorted(fixed[path], key=Finding.sort_key)
            where = ", ".join(f"`{f.scope}` (line {f.span.line})" for f in fs)
            how = "; ".join(sorted({f.fix.description for f in fs if f.fix}))
            lines.append(f"| `{_rel(path, root)}` | {len(fs)} | {where} | {how} |")
    else:
        lines.append("Nothing to fix.")
    lines += ["", "## Left for a human", ""]
    if left:
        lines += ["| site | code | scope | why |", "|---|---|---|---|"]
        for f in left:
            why = f.no_fix_reason or (f"unsafe fix: {f.fix.unsafe_reason}" if f.fix else f.message)
            lines.append(f"| `{_rel(f.path, root)}:{f.span.line}` | {f.code} | `{f.scope}` | {why.replace('|', '/')} |")
    else:
        lines.append("None: every site was fixed.")
    lines += [
        "",
        "## Safety",
        "",
        "Each rewrite keeps behaviour for fp16, bf16, fp32 and fp8 weights and changes only the packed "
        "storages it exists to fix (int32, uint8, int8, no `.weight`); guarded idioms were proven "
        "equivalent by truth table before rewriting. Every rewritten file was re-parsed before it was "
        "written, and re-checked afterwards.",
        "",
    ]
    return "\n".join(lines)


def _print_summary(fixed, left, helper, created, report_path) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout, highlight=False, soft_wrap=True)
    table = Table(title="dtype-lint migrate")
    table.add_column("file")
    table.add_column("fixed", justify="right")
    for path in sorted(fixed):
        table.add_row(path, str(len(fixed[path])))
    if fixed:
        console.print(table)
    console.print(f"helper: {helper.module}:{helper.func} at {helper.path} ({_helper_state(helper, created, 'created')})")
    console.print(f"fixed {sum(len(v) for v in fixed.values())} sites in {len(fixed)} files; {len(left)} left")
    console.print(f"report: {report_path}")
