"""`dtype-lint` command line. Exit codes: 0 clean, 1 findings remain (or --diff has changes), 2 error.

argparse, not click: a cached pre-commit run must not pay for imports it does not use; rich and
libcst are imported only when output or a fix needs them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dtype_lint import __version__
from dtype_lint.reporters import FORMATS

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


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
    m.add_argument("--series", metavar="DIR", help="write the migration as `git format-patch` patches in DIR "
                   "(the helper first, then one per group) instead of rewriting the tree; apply with `git am`")
    m.add_argument("--group-by", choices=("file", "directory", "rule"), default="file",
                   help="how --series splits the change (default: %(default)s)")

    d = sub.add_parser("doctor", help="show the resolved configuration, the helper's location and which quantizable roots match",
                       description="What a check of PATHS would use and see: the configuration and where each setting "
                                   "came from, the project root, the files in scope, where the shared helper is (or "
                                   "would be created, or why it cannot be), and which quantizable roots match classes "
                                   "in the tree. Use it when a tree comes out clean and you expected findings.")
    d.add_argument("paths", nargs="*", default=["."], help="files or directories (default: .)")
    d.add_argument("--config", metavar="FILE")
    d.add_argument("--preset")
    d.add_argument("--exclude", type=_codes, default=None, help="comma-separated extra exclude patterns")
    d.add_argument("--no-cache", action="store_true")

    v = sub.add_parser("verify", help="prove on reference kernels that the MLA prefill fix changes nothing but the crash",
                       add_help=False)
    v.add_argument("verify_args", nargs=argparse.REMAINDER)
    # Each command's own parser, so that a bad flag after `check` prints `check`'s usage.
    p.set_defaults(_commands={"check": c, "rule": r, "migrate": m, "doctor": d, "verify": v})
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    """argparse reports unknown flags with the top-level usage; ours name the command's own."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub = args._commands.get(args.command, parser)
        sub.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if (problem := environment_problem()) is not None:
        print(f"dtype-lint: error: {problem}", file=sys.stderr)
        return EXIT_ERROR
    commands = {"check", "rule", "migrate", "doctor", "verify"}
    if not argv or (argv[0] not in commands and argv[0] not in ("-h", "--help", "--version")):
        argv = ["check", *argv]
    if argv[0] == "verify":
        return _verify(argv[1:])
    args = parse(argv)
    from dtype_lint.engine.pipeline import UserError

    try:
        if args.command == "rule":
            return _rule(args)
        if args.command == "migrate":
            return _migrate(args)
        if args.command == "doctor":
            return _doctor(args)
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


def environment_problem() -> str | None:
    """What in the environment makes any run impossible (a deleted current folder: every
    relative path, the project root and the cache hang off it), or None."""
    try:
        os.getcwd()
    except OSError as e:
        return (f"the current folder cannot be reached ({e.strerror or e}; deleted while this shell was in it?): "
                "cd to an existing folder and run again")
    return None


def _config(args, paths: list[str]):
    from dtype_lint.config import ConfigError, load_for_run
    from dtype_lint.engine.pipeline import UserError

    overrides = {}
    if getattr(args, "select", None):
        overrides["select"] = args.select
    if getattr(args, "ignore", None):
        overrides["ignore"] = args.ignore
    if getattr(args, "preset", None):
        overrides["preset"] = args.preset
    if getattr(args, "name_heuristics", False):
        overrides["name-heuristics"] = True
    try:
        return load_for_run(paths, args.config, overrides, getattr(args, "exclude", None))
    except ConfigError as e:
        raise UserError(str(e)) from None


def _check(args) -> int:
    from dtype_lint.engine.pipeline import RunOptions, run
    from dtype_lint.engine.progress import progress_bar

    cfg = _config(args, args.paths)
    _check_named_file(args.output_file, "-o", cfg, args.paths, args.baseline)
    tick, stop = progress_bar(args.no_progress)
    try:
        result = run(cfg, RunOptions(
            paths=args.paths, changed_since=args.changed_since, jobs=args.jobs, use_cache=not args.no_cache,
            fix=args.fix and not args.diff, diff=args.diff, unsafe_fixes=args.unsafe_fixes,
            baseline=args.baseline, write_baseline=args.write_baseline, progress=tick))
    finally:
        stop()
    if args.write_baseline:
        print(f"dtype-lint: wrote baseline {args.write_baseline} ({result.baselined} findings)", file=sys.stderr)
    if args.diff:
        sys.stdout.write(result.diff)
        if result.diff:
            return EXIT_FINDINGS
        # No diff: report like a plain check (suppressed and baselined findings do not count).
    _report(result, args)
    _print_writes(result)
    _print_warnings(result)
    if args.exit_zero:
        return EXIT_CLEAN
    return EXIT_FINDINGS if result.findings else EXIT_CLEAN


def _print_writes(result) -> None:
    """Every file a run created or changed, on stderr (the cache only when its folder is made)."""
    for w in result.writes:
        if w.why == "cache" and not w.path.endswith("/"):
            continue
        what = "created" if w.action == "created" else "wrote"
        print(f"dtype-lint: {what} {_printable(w.path)} ({w.why})", file=sys.stderr)


def _print_warnings(result) -> None:
    for warning in result.warnings:
        print(f"dtype-lint: warning: {_printable(warning)}", file=sys.stderr)


def _printable(text: str) -> str:
    """A path as a terminal may show it: control characters escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def rule_infos() -> dict:
    from dtype_lint.reporters import RuleInfo
    from dtype_lint.rules import ALL_RULES

    return {r.code: RuleInfo(r.code, r.name, r.summary, rule_doc(r)) for r in ALL_RULES}


def _report(result, args) -> None:
    from dtype_lint.engine.pipeline import safe_read
    from dtype_lint.reporters import RunSummary, render

    summary = RunSummary(
        files_checked=len(result.files), files_analyzed=result.analyzed, elapsed_s=result.elapsed_s,
        fixed=len(result.fixed),
        fixes_available_safe=sum(1 for f in result.findings if f.fix and f.fix.safe),
        fixes_available_unsafe=sum(1 for f in result.findings if f.fix and not f.fix.safe),
        unsafe_fixes_enabled=args.unsafe_fixes, quiet=args.quiet,
    )
    color = {"always": True, "never": False}.get(args.color)
    fmt = args.output_format or "text"
    import io

    out = io.StringIO() if args.output_file else sys.stdout
    render(fmt, result.findings, summary, out, read_source=safe_read, rules=rule_infos(), color=color,
           statistics=args.statistics)
    if args.output_file:
        _write_named_file(result, args.output_file, out.getvalue(), "report")


def _check_named_file(path: str | None, flag: str = "", cfg=None, paths=(), baseline=None,
                      folder: bool = False) -> None:
    """A report file the user named must be writable before a run starts, not after it has
    rewritten files, and must not be one of the run's inputs (engine/outputs.py)."""
    from dtype_lint.engine.outputs import check_output
    from dtype_lint.engine.pipeline import UserError
    from dtype_lint.engine.writer import target_problem

    if path and cfg is not None and (problem := check_output(path, flag, cfg, paths=paths, baseline=baseline,
                                                            folder=folder)):
        raise UserError(problem)
    if path and not folder and (problem := target_problem(path)):
        raise UserError(problem)


def _write_named_file(result, path: str, text: str, why: str, flag: str = "") -> None:
    from dtype_lint.engine.outputs import check_output
    from dtype_lint.engine.pipeline import UserError
    from dtype_lint.engine.writer import WriteError

    if problem := check_output(path, flag, result.config, paths=result.files):
        raise UserError(problem)
    try:
        result.writer.write(path, text.encode("utf-8"), why, outside_ok=True)
    except WriteError as e:
        raise UserError(str(e)) from None


def _migrate(args) -> int:

    from dtype_lint.migrate.migration import print_summary, render_report, run_migration
    from dtype_lint.engine.pipeline import UserError
    from dtype_lint.engine.progress import progress_bar

    if not Path(args.path).exists():
        raise UserError(f"{args.path}: no such file or directory")
    cfg = _config(args, [args.path])
    _check_named_file(args.report, "--report", cfg, [args.path])
    _check_named_file(args.series, "--series", cfg, [args.path], folder=True)
    tick, stop = progress_bar(args.no_progress)
    try:
        if args.series:
            return _series(args, cfg, tick)
        result = run_migration(cfg, args.path, unsafe_fixes=args.unsafe_fixes, jobs=args.jobs, progress=tick)
    finally:
        stop()
    report = render_report(args.path, result, args.report)
    try:
        _write_named_file(result, args.report, report, "report")
    except UserError as e:
        # The tree is already rewritten: the report must not be lost with the error.
        sys.stdout.write(report)
        print(f"dtype-lint: error: {e}; the report is printed above", file=sys.stderr)
        return EXIT_ERROR
    print_summary(result, args.report)
    _print_writes(result)
    _print_warnings(result)
    return EXIT_FINDINGS if result.findings else EXIT_CLEAN


def _series(args, cfg, tick) -> int:
    from dtype_lint.migrate.migration import migration_series, render_report

    result, patches, files = migration_series(cfg, args.path, args.series, args.group_by,
                                              unsafe_fixes=args.unsafe_fixes, jobs=args.jobs, progress=tick)
    _write_named_file(result, args.report, render_report(args.path, result, series=True), "report")
    for f in files:
        print(f)
    print(f"dtype-lint: {len(files)} patches in {args.series}; apply them in order with `git am {args.series}/*.patch`",
          file=sys.stderr)
    return EXIT_CLEAN


def _doctor(args) -> int:
    from dtype_lint.doctor import diagnose, render

    cfg = _config(args, args.paths)
    result, matches = diagnose(cfg, args.paths, use_cache=not args.no_cache)
    sys.stdout.write(render(result, matches))
    return EXIT_CLEAN


def _rule(args) -> int:
    from dtype_lint.findings import ENGINE_CODES
    from dtype_lint.engine.pipeline import UserError
    from dtype_lint.rules import ALL_RULES, RULES_BY_CODE

    if args.all or not args.code:
        for r in ALL_RULES:
            print(f"{r.code}  {r.name:<28} {r.summary}")
        for c in ENGINE_CODES.values():
            print(f"{c.code}  {c.name:<28} {c.summary}")
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
