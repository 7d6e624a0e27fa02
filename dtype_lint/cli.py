"""`dtype-lint` command line. Exit codes: 0 clean, 1 findings remain (or --diff has changes), 2 error.

argparse, not click: a cached pre-commit run must not pay for imports it does not use; rich and
libcst are imported only when output or a fix needs them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import __version__

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
FORMATS = ("text", "concise", "json", "github", "sarif", "junit", "gitlab")


def _codes(value: str) -> list[str]:
    return [c.strip() for c in value.split(",") if c.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dtype-lint",
        description="Find and fix activations cast to a quantizable layer's storage dtype "
                    "(`x.to(layer.weight.dtype)`): Marlin stores FP8 weights as int32, NVFP4 as uint8, "
                    "and AWQ layers have no `.weight`.",
        epilog="exit codes: 0 clean, 1 findings remain (or --diff would change files), 2 error. "
               "`dtype-lint rule DTL001` explains a rule.",
    )
    p.add_argument("--version", action="version", version=f"dtype-lint {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    c = sub.add_parser("check", help="lint files and directories (the default command)",
                       description="Lint Python files for DTL rules; optionally fix them.")
    c.add_argument("paths", nargs="*", default=["."], help="files or directories (default: .)")
    c.add_argument("--fix", action="store_true", help="apply safe fixes in place")
    c.add_argument("--unsafe-fixes", action="store_true", help="also apply (with --fix/--diff) or show fixes marked unsafe")
    c.add_argument("--diff", action="store_true", help="print the fixes as a unified diff; write nothing; exit 1 if there is a diff")
    c.add_argument("--select", type=_codes, help="comma-separated codes or prefixes to enable (e.g. DTL001)")
    c.add_argument("--ignore", type=_codes, help="comma-separated codes or prefixes to disable")
    c.add_argument("--output-format", choices=FORMATS, default=None, help="report format (default: text)")
    c.add_argument("-o", "--output-file", help="write the report to a file instead of stdout")
    c.add_argument("-j", "--jobs", type=int, default=None, help="worker processes (default: CPU count)")
    c.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    c.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings remain")
    c.add_argument("--statistics", action="store_true", help="print counts per rule instead of each finding")
    c.add_argument("--baseline", metavar="FILE", help="hide findings recorded in FILE (keyed by path, scope and expression)")
    c.add_argument("--write-baseline", metavar="FILE", help="record the current findings in FILE; an existing baseline may only shrink")
    c.add_argument("--changed-since", metavar="REF", help="only report files changed since a git ref (the class index still covers every file)")
    c.add_argument("--config", metavar="FILE", help="pyproject.toml or a TOML file with [tool.dtype-lint] (default: nearest pyproject.toml)")
    c.add_argument("--exclude", type=_codes, default=None, help="comma-separated extra exclude patterns (gitignore-style)")
    c.add_argument("--preset", help="vllm (default) or generic")
    c.add_argument("--name-heuristics", action="store_true", help="also report low-confidence sites whose layer class did not resolve but whose name looks like a projection")
    c.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    c.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    c.add_argument("-q", "--quiet", action="store_true", help="print findings only, no summary")

    r = sub.add_parser("rule", help="explain a rule", description="Print a rule's documentation.")
    r.add_argument("code", nargs="?", help="e.g. DTL001")
    r.add_argument("--all", action="store_true", help="list every rule")

    m = sub.add_parser("migrate", help="one-shot migration of a codebase to the shared helper",
                       description="Create the helper if needed, apply safe fixes across the tree, "
                                   "and write a markdown report for the pull request.")
    m.add_argument("path", help="the tree to migrate")
    m.add_argument("--report", metavar="FILE", default="dtype-lint-migration.md", help="markdown report path (default: %(default)s)")
    m.add_argument("--unsafe-fixes", action="store_true", help="also apply fixes marked unsafe")
    m.add_argument("-j", "--jobs", type=int, default=None)
    m.add_argument("--config", metavar="FILE")
    m.add_argument("--preset")
    m.add_argument("--no-progress", action="store_true")

    v = sub.add_parser("verify", help="prove on reference kernels that the MLA prefill fix changes nothing but the crash",
                       add_help=False)
    v.add_argument("verify_args", nargs=argparse.REMAINDER)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {"check", "rule", "migrate", "verify"}
    if not argv or (argv[0] not in commands and argv[0] not in ("-h", "--help", "--version")):
        argv = ["check", *argv]
    if argv[0] == "verify":
        return _verify(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        if args.command == "rule":
            return _rule(args)
        if args.command == "migrate":
            from .migrate import run_migrate

            return run_migrate(args)
        return _check(args)
    except KeyboardInterrupt:
        print("dtype-lint: interrupted", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `dtype-lint check | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except UserError as e:
        print(f"dtype-lint: error: {e}", file=sys.stderr)
        return EXIT_ERROR


class UserError(Exception):
    pass


def load_run_config(args):
    from .config import ConfigError, load_config

    overrides = {}
    if getattr(args, "select", None):
        overrides["select"] = args.select
    if getattr(args, "ignore", None):
        overrides["ignore"] = args.ignore
    if getattr(args, "preset", None):
        overrides["preset"] = args.preset
    if getattr(args, "name_heuristics", False):
        overrides["name-heuristics"] = True
    start = Path(args.paths[0] if hasattr(args, "paths") else args.path)
    try:
        cfg = load_config(start if start.exists() else Path.cwd(),
                          Path(args.config) if args.config else None, overrides)
    except ConfigError as e:
        raise UserError(str(e)) from None
    if getattr(args, "exclude", None):
        cfg.exclude = list(cfg.exclude) + args.exclude
    return cfg


def progress_callback(disabled: bool):
    """A rich progress bar on stderr for large interactive runs (stages of 200+ files, and always
    for fixing); never in CI or pre-commit, never when stderr is not a terminal."""
    if disabled or not sys.stderr.isatty() or os.environ.get("CI") or os.environ.get("PRE_COMMIT"):
        return None, lambda: None
    state = {}

    def tick(done: int, total: int, stage: str):
        if total < 200 and stage != "fix":
            return
        if "bar" not in state:
            from rich.progress import Progress

            state["bar"] = Progress(transient=True, console=_stderr_console())
            state["bar"].start()
        bar = state["bar"]
        if state.get("stage") != stage:
            state["task"] = bar.add_task(stage, total=total)
            state["stage"] = stage
        bar.update(state["task"], completed=done)

    def stop():
        if "bar" in state:
            state["bar"].stop()

    return tick, stop


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)


def _check(args) -> int:
    from .discovery import DiscoveryError
    from .engine import Engine

    cfg = load_run_config(args)
    tick, stop = progress_callback(args.no_progress)
    try:
        result = Engine(cfg, jobs=args.jobs, use_cache=not args.no_cache, progress=tick).run(
            args.paths, changed_ref=args.changed_since)
    except DiscoveryError as e:
        raise UserError(str(e)) from None
    finally:
        stop()
    findings, fixed_count = result.findings, 0
    if args.fix or args.diff:
        findings, fixed_count, diff_changed = _fix_or_diff(args, cfg, result)
        if args.diff and diff_changed:
            return EXIT_FINDINGS
        # No diff: report like a plain check (suppressed and baselined findings do not count).
    findings = _post_filter(findings, args, cfg, result)
    _report(findings, result, args, fixed_count)
    if args.exit_zero:
        return EXIT_CLEAN
    return EXIT_FINDINGS if findings else EXIT_CLEAN


def _fix_or_diff(args, cfg, result):
    """Fix (or, with --diff, print the fixes of) every file with a selected fix.
    Returns (findings after fixing, number fixed, whether --diff printed anything)."""
    from .apply import HelperError, create_helper, fix_files, locate_helper, write_outcomes

    findings = result.findings
    fixable_paths = sorted({f.path for f in findings if f.fix and (f.fix.safe or args.unsafe_fixes)})
    if not fixable_paths:
        return findings, 0, False
    try:
        helper = locate_helper(cfg, result.files)
    except HelperError as e:
        raise UserError(str(e)) from None
    outcomes = fix_files(fixable_paths, result.headers, result.index, cfg, args.unsafe_fixes, result_jobs(args))
    changed = [o for o in outcomes if o.changed]
    if args.diff:
        if changed and not helper.exists:
            import difflib

            sys.stdout.write("".join(difflib.unified_diff(
                [], helper.source.splitlines(keepends=True),
                fromfile="/dev/null", tofile=f"b/{os.path.relpath(helper.path)}")))
        for o in changed:
            sys.stdout.write(o.diff())
        return findings, 0, bool(changed)
    if changed and not helper.exists:
        create_helper(helper)
    write_outcomes(changed)
    fixed_paths = {o.path for o in outcomes}
    after = [f for f in findings if f.path not in fixed_paths]
    fixed = 0
    for o in outcomes:
        after.extend(o.remaining)
        fixed += len(o.applied) if o.changed else 0
    return sorted(after, key=lambda f: f.sort_key()), fixed, False


def result_jobs(args) -> int:
    return max(1, args.jobs or os.cpu_count() or 1)


def read_source(path: str) -> str | None:
    from .engine import _safe_read

    return _safe_read(path)


def _post_filter(findings, args, cfg, result):
    """Suppression comments, then the baseline."""
    from .rules import ALL_RULES
    from .suppressions import apply_suppressions

    cache: dict[str, str | None] = {}

    def src(path):
        if path not in cache:
            cache[path] = read_source(path)
        return cache[path]

    enabled = [c for c in [r.code for r in ALL_RULES] + ["DTL900", "DTL901", "DTL902"] if cfg.enabled(c)]
    kept, extra = apply_suppressions(findings, src, paths=result.suppression_files, enabled_codes=enabled)
    findings = sorted(kept + [f for f in extra if cfg.enabled(f.code, f.path)], key=lambda f: f.sort_key())
    if args.write_baseline:
        from .baseline import BaselineError, write_baseline

        try:
            write_baseline(args.write_baseline, findings, cfg.root)
        except BaselineError as e:
            raise UserError(str(e)) from None
        print(f"dtype-lint: wrote baseline {args.write_baseline} ({len(findings)} findings)", file=sys.stderr)
        return []
    if args.baseline:
        from .baseline import Baseline, BaselineError

        try:
            baseline = Baseline.load(args.baseline)
        except (OSError, ValueError, BaselineError) as e:
            raise UserError(f"cannot read baseline {args.baseline}: {e}") from None
        findings, _matched, _stale = baseline.filter(findings, cfg.root)
    return findings


def _report(findings, result, args, fixed_count: int) -> None:
    from .reporters import RuleInfo, RunSummary, render
    from .rules import ALL_RULES

    rules = {r.code: RuleInfo(r.code, r.name, r.summary, f"docs/rules/{r.code}.md") for r in ALL_RULES}
    for code, name, summary in (("DTL900", "parse-error", "the file could not be read or parsed"),
                                ("DTL901", "fix-failed", "a fix could not be applied; the file was left untouched"),
                                ("DTL902", "suppression", "an unused or malformed suppression comment")):
        rules[code] = RuleInfo(code, name, summary, "docs/rules/README.md")
    summary = RunSummary(
        files_checked=len(result.files), files_analyzed=result.analyzed, elapsed_s=result.elapsed_s,
        fixed=fixed_count,
        fixes_available_safe=sum(1 for f in findings if f.fix and f.fix.safe),
        fixes_available_unsafe=sum(1 for f in findings if f.fix and not f.fix.safe),
        unsafe_fixes_enabled=args.unsafe_fixes,
    )
    color = {"always": True, "never": False}.get(args.color)
    fmt = args.output_format or "text"
    out = open(args.output_file, "w", encoding="utf-8") if args.output_file else sys.stdout
    try:
        render(fmt, findings, summary, out, read_source=read_source, rules=rules, color=color,
               statistics=args.statistics)
    finally:
        if out is not sys.stdout:
            out.close()


def _rule(args) -> int:
    from .rules import ALL_RULES, RULES_BY_CODE

    if args.all or not args.code:
        for r in ALL_RULES:
            print(f"{r.code}  {r.name:<22} {r.summary}")
        return EXIT_CLEAN
    rule = RULES_BY_CODE.get(args.code.upper())
    if rule is None:
        raise UserError(f"unknown rule `{args.code}`; `dtype-lint rule --all` lists them")
    print(rule_doc(rule))
    return EXIT_CLEAN


def rule_doc(rule) -> str:
    import inspect

    doc = inspect.getdoc(sys.modules[rule.__module__]) or ""
    title, _, body = doc.partition("\n")
    return f"# {title}\n{body}\n"


def _verify(argv: list[str]) -> int:
    try:
        from dtype_lint.kernels_ref.harness.verify import main as verify_main
    except ImportError as e:
        print(f"dtype-lint: error: `verify` needs torch: pip install 'dtype-lint[verify]' ({e})", file=sys.stderr)
        return EXIT_ERROR
    return int(verify_main(argv) or 0)
