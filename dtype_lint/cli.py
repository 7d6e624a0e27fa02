"""`dtype-lint` command line. Exit codes: 0 clean, 1 findings remain (or --diff has changes, or
--exit-non-zero-on-fix fixed something), 2 error.

The flags follow Ruff's where Ruff has one (`--force-exclude`, `--stdin-filename`, `--show-fixes`,
`--extend-select`, `--fix-only`, `--exit-non-zero-on-fix`, `--add-noqa`, `--statistics`): a Ruff
user's muscle memory and pre-commit/CI setups carry over. Every path printed, on stdout or stderr,
is relative to the current folder (as Ruff's are).

argparse, not click: a cached pre-commit run must not pay for imports it does not use; rich and
libcst are imported only when output or a fix needs them.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from pathlib import Path

from dtype_lint import __version__
from dtype_lint.cli_output import (
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_FINDINGS,
    _config,
    _exit_code,
    _from_cwd,
    _print_warnings,
    _printable,
    _render,
    command_line_settings,
    plural,
    rule_doc,
)
from dtype_lint.core.rule_registry import opt_in_codes
from dtype_lint.reporters import FORMATS


def _codes(value: str) -> list[str]:
    return [c.strip() for c in value.split(",") if c.strip()]


def _terminal_columns() -> int:
    """`shutil.get_terminal_size().columns`, without importing shutil: COLUMNS when it is a
    positive integer, else the width of the terminal on stdout, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):  # no stdout, closed, detached, not a terminal
            columns = 0
        columns = columns or 80
    return columns


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's help formatter, at the width it would choose itself, found without shutil:
    argparse makes a formatter for every `add_argument`, and `HelpFormatter` imports shutil (with
    zlib, bz2 and lzma: 0.7 MiB of a check's peak RSS) for `shutil.get_terminal_size` alone."""

    def __init__(self, prog, indent_increment=2, max_help_position=24, width=None, **kwargs):
        if width is None:
            width = _terminal_columns() - 2
        super().__init__(prog, indent_increment, max_help_position, width, **kwargs)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose help uses `_HelpFormatter`; `add_subparsers` makes its commands'
    parsers of this class too."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; `only="check"`: the top level with `check` alone (what a check
    parses: the other commands' parsers are half of building it, and of a pre-commit run's work
    before the engine, for nothing)."""
    p = _Parser(
        prog="dtype-lint",
        description="Find and fix activations cast to a quantizable layer's storage dtype "
                    "(`x.to(layer.weight.dtype)`): a quantization backend may repack the weight into int32 "
                    "or uint8, or leave the layer with no `.weight` at all.",
        epilog="exit codes: 0 clean, 1 findings remain (or --diff would change files), 2 error. "
               "`dtype-lint rule DTL001` explains a rule.",
    )
    p.add_argument("--version", action="version", version=f"dtype-lint {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    c = sub.add_parser("check", help="lint files and directories (the default command)",
                       description="Lint Python files for DTL rules; optionally fix them. A file that "
                                   "can hold a site but does not parse is DTL900; only what can hold a site "
                                   "is parsed (with the default rules, not the bodies of functions no rule "
                                   "reads), so a syntax error elsewhere is left to other linters.")
    c.add_argument("paths", nargs="*", default=None,
                   help="files or directories (default: .); `-` reads one file from stdin (see --stdin-filename)")
    c.add_argument("--fix", action="store_true", help="apply safe fixes in place")
    c.add_argument("--unsafe-fixes", action="store_true",
                   help="also apply (with --fix/--diff) or show fixes marked unsafe")
    c.add_argument("--diff", action="store_true", help="print only the fixes, as a unified diff; write nothing; "
                   "exit 1 if there is a diff, 0 (and print nothing) if no fix applies")
    c.add_argument("--fix-only", action="store_true", help="apply safe fixes, but report no remaining finding "
                   "and exit 0 for them")
    c.add_argument("--exit-non-zero-on-fix", action="store_true", help="exit 1 when a fix was applied, even if "
                   "no finding remains")
    c.add_argument("--show-fixes", action="store_true",
                   help="list the fixes applied (with --fix) or available, per file")
    c.add_argument("--add-noqa", nargs="?", const="", default=None, metavar="REASON",
                   help="suppress every remaining finding where it is: `# noqa: CODE`, or with "
                        "`--add-noqa=REASON` `# dtype-lint: ignore[CODE] REASON`")
    c.add_argument("--select", type=_codes,
                   help="comma-separated codes or prefixes to enable (e.g. DTL001); the opt-in rules "
                   f"{', '.join(sorted(opt_in_codes()))} run only when named by code (or ALL)")
    c.add_argument("--extend-select", type=_codes,
                   help="comma-separated codes or prefixes to enable on top of `select`")
    c.add_argument("--ignore", type=_codes, help="comma-separated codes or prefixes to disable")
    c.add_argument("--output-format", choices=FORMATS, default=None, help="report format (default: text)")
    c.add_argument("-o", "--output-file", help="write the report to a file instead of stdout")
    c.add_argument("-j", "--jobs", type=int, default=None, help="worker processes (default: CPU count)")
    c.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    c.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings remain")
    c.add_argument("--statistics", action="store_true", help="print counts per rule instead of each finding, "
                   "one `count code [*] name` line each (as Ruff)")
    c.add_argument("--statistics-table", action="store_true", help="the counts per rule as a table")
    c.add_argument("--baseline", metavar="FILE",
                   help="hide findings recorded in FILE (keyed by path, scope and expression)")
    c.add_argument("--write-baseline", metavar="FILE",
                   help="record the current findings in FILE; an existing baseline may only shrink")
    c.add_argument("--changed-since", metavar="REF",
                   help="only report files changed since a git ref (the class index still covers every file)")
    c.add_argument("--config", metavar="FILE", help="pyproject.toml, or a TOML file with the settings at its top level "
                   "(default: the nearest .dtype-lint.toml, dtype-lint.toml or pyproject.toml with [tool.dtype-lint])")
    c.add_argument("--exclude", type=_codes, default=None,
                   help="comma-separated extra exclude patterns (gitignore-style)")
    c.add_argument("--force-exclude", action=argparse.BooleanOptionalAction, default=None,
                   help="apply `exclude` to files named on the command line too (pre-commit names each "
                        "file; on in the shipped hooks); default: the `force-exclude` setting, else off")
    c.add_argument("--stdin-filename", metavar="PATH", help="check the text on stdin as the file PATH of its "
                   "project (its configuration, excludes and classes); with --fix, print the fixed text")
    c.add_argument("--preset", help="vllm (default) or generic")
    c.add_argument("--line-length", type=int, metavar="N",
                   help="wrap the lines a fix adds at N columns (default: the project's ruff/black/isort "
                        "line length; no wrapping when it configures none)")
    c.add_argument("--name-heuristics", action="store_true",
                   help="also report low-confidence sites whose layer class did not resolve but whose name looks "
                        "like a projection")
    c.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    c.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    c.add_argument("-q", "--quiet", action="store_true", help="print findings only, no summary")
    c.add_argument("-v", "--verbose", action="store_true", help="also say on stderr what the run wrote for itself "
                   "(the cache, reports, baselines), and each warning's detail")

    if only == "check":
        p.set_defaults(_commands={"check": c})
        return p

    r = sub.add_parser("rule", help="explain a rule", description="Print a rule's documentation.")
    r.add_argument("code", nargs="?", help="e.g. DTL001")
    r.add_argument("--all", action="store_true", help="list every rule")

    m = sub.add_parser("migrate", help="one-shot migration of a codebase to the shared helper",
                       description="Create the helper if needed, apply safe fixes across the tree, "
                                   "and write a markdown report for the pull request. With --series DIR, "
                                   "leave the tree as it is and write the change as patches into DIR only.",
                       epilog="Exit status, in both modes: 0 when a fresh check of the migrated result (the "
                              "tree, or the tree with every patch applied) finds nothing left, 1 when sites "
                              "are left for a human, 2 on an error.")
    m.add_argument("path", help="the tree to migrate")
    m.add_argument("--report", metavar="FILE", default=None,
                   help="markdown report path (default: dtype-lint-migration.md in place; with --series, "
                        "none: DIR gets PR.md and README.md)")
    m.add_argument("--unsafe-fixes", action="store_true", help="also apply fixes marked unsafe")
    m.add_argument("-j", "--jobs", type=int, default=None)
    m.add_argument("--config", metavar="FILE")
    m.add_argument("--preset")
    m.add_argument("--line-length", type=int, metavar="N",
                   help="wrap the lines a fix adds at N columns (default: the project's ruff/black/isort "
                        "line length; no wrapping when it configures none)")
    m.add_argument("--no-progress", action="store_true")
    m.add_argument("--series", metavar="DIR", help="write the migration as `git format-patch` patches in DIR "
                   "(the helper first, then one per group) instead of rewriting the tree; apply with `git am` on "
                   "the files it prints. No file of yours in DIR is overwritten (an earlier --series run's "
                   "are replaced)")
    m.add_argument("--group-by", choices=("file", "directory", "rule"), default="file",
                   help="how --series splits the change (default: %(default)s)")
    m.add_argument("--convention", choices=("auto", "vllm", "transformers", "diffusers", "generic"), default="auto",
                   help="whose conventions the --series commits follow (titles, PR template, test layout, "
                        "sign-off); default: detected from the tree's top-level package")
    m.add_argument("--author", metavar="'NAME <EMAIL>'",
                   help="author and sign-off of the --series commits (default: git config user.name/user.email)")
    m.add_argument("--signoff", action=argparse.BooleanOptionalAction, default=None,
                   help="add Signed-off-by: to each --series commit (default: on for vllm, whose DCO asks for it)")

    d = sub.add_parser("doctor",
                       help="show the resolved configuration, the helper's location and which quantizable roots match",
                       description="What a check of PATHS would use and see: the configuration and where each setting "
                                   "came from, the project root, the files in scope, where the shared helper is (or "
                                   "would be created, or why it cannot be), and which quantizable roots match classes "
                                   "in the tree. Use it when a tree comes out clean and you expected findings.")
    d.add_argument("paths", nargs="*", default=["."], help="files or directories (default: .)")
    d.add_argument("--config", metavar="FILE")
    d.add_argument("--preset")
    d.add_argument("--exclude", type=_codes, default=None, help="comma-separated extra exclude patterns")
    d.add_argument("--no-cache", action="store_true")

    cl = sub.add_parser("clean", help="remove the project's cache",
                        description="Remove what dtype-lint keeps in the cache folder of the project PATH is in "
                                    "(`cache-dir`, default .dtype_lint_cache): the entries of every version and "
                                    "setting, the pre-commit replay's records and its `.gitignore`. Anything "
                                    "else in the folder is kept and named. A run also removes, when it starts a "
                                    "new cache folder, those of other versions or settings unused for 30 days.")
    cl.add_argument("path", nargs="?", default=".", help="a file or folder of the project (default: .)")
    cl.add_argument("--config", metavar="FILE")

    e = sub.add_parser("explain", help="show the storage model for the layers read at PATH:LINE",
                       description="For each `X.weight` on the line: the class X resolves to, whether a quantization "
                                   "config reaches it, the backends that can be handed it and the storage each gives "
                                   "`weight` (with the line that makes it), and what the rules conclude. Backends "
                                   "that keep `weight` in the compute dtype are one line; --verbose lists every "
                                   "backend with each line of its chain.")
    e.add_argument("site", metavar="PATH:LINE")
    e.add_argument("--config", metavar="FILE")
    e.add_argument("-v", "--verbose", action="store_true",
                   help="every backend, and every line from the dispatch to the storage")

    sub.add_parser("server", help="run the Language Server (LSP over stdio) for editors: diagnostics and quick-fixes",
                   description="A Language Server over stdio: diagnostics for each Python document on open, "
                               "change and save, and each safe fix as a quick-fix code action. Needs the `lsp` "
                               "extra (pygls).")
    v = sub.add_parser("verify",
                       help="prove on reference kernels that the MLA prefill fix changes nothing but the crash",
                       add_help=False)
    v.add_argument("verify_args", nargs=argparse.REMAINDER)
    # Each command's own parser, so that a bad flag after `check` prints `check`'s usage.
    p.set_defaults(_commands={"check": c, "rule": r, "migrate": m, "doctor": d, "clean": cl, "explain": e,
                                "verify": v})
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    """argparse reports unknown flags with the top-level usage; ours name the command's own."""
    parser = build_parser("check" if argv[:1] == ["check"] else None)
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub = args._commands.get(args.command, parser)
        sub.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    from dtype_lint.stdout_guard import run_guarded

    argv = list(sys.argv[1:] if argv is None else argv)
    # A failed write to stdout is a message and exit 2, a non-encodable character an escape.
    return run_guarded(lambda: _main(argv))


def _main(argv: list[str]) -> int:
    import warnings

    from dtype_lint.core.trees import ignore_parser_warnings

    with warnings.catch_warnings():
        ignore_parser_warnings()  # explain, migrate, verify... parse the user's files too
        return _command(argv)


def _command(argv: list[str]) -> int:
    if (problem := environment_problem()) is not None:
        print(f"dtype-lint: error: {problem}", file=sys.stderr)
        return EXIT_ERROR
    from dtype_lint.fast_path import try_clean_exit  # before the engine: see its docstring

    if (code := try_clean_exit(argv)) is not None:
        return code
    commands = {"check", "rule", "migrate", "doctor", "clean", "explain", "verify", "server"}
    if not argv or (argv[0] not in commands and argv[0] not in ("-h", "--help", "--version")):
        argv = ["check", *argv]
    if argv[0] == "verify":
        return _verify(argv[1:])
    # `--add-noqa` takes its reason only as `--add-noqa=REASON`: a bare one never eats a path.
    argv = ["--add-noqa=" if a == "--add-noqa" else a for a in argv]
    args = parse(argv)
    from dtype_lint.run.pipeline import UserError

    try:
        if args.command == "rule":
            return _rule(args)
        if args.command == "migrate":
            return _migrate(args)
        if args.command == "doctor":
            return _doctor(args)
        if args.command == "clean":
            return _clean(args)
        if args.command == "explain":
            from dtype_lint.explain import run as explain

            return explain(args.site, args.config, args.verbose)
        if args.command == "server":
            return _server()
        return _check(args)
    except KeyboardInterrupt:
        print("dtype-lint: interrupted", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `dtype-lint check | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except UserError as error:
        print(f"dtype-lint: error: {error}", file=sys.stderr)
        return EXIT_ERROR


def _check(args) -> int:
    from dtype_lint.run.pipeline import RunOptions, UserError, run
    from dtype_lint.run.progress import progress_bar

    _check_combinations(args)
    if args.paths == ["-"] or (args.stdin_filename and not args.paths):
        from dtype_lint.cli_modes import check_stdin

        return check_stdin(args)
    if "-" in (args.paths or []):
        raise UserError("`-` (stdin) must be the only path")
    paths = args.paths or ["."]
    cfg = _config(args, paths)
    _check_named_file(args.output_file, "-o", cfg, paths, args.baseline)
    tick, stop = progress_bar(args.no_progress)
    try:
        result = run(cfg, RunOptions(
            paths=paths, changed_since=args.changed_since, jobs=args.jobs, use_cache=not args.no_cache,
            fix=(args.fix or args.fix_only) and not args.diff, diff=args.diff, unsafe_fixes=args.unsafe_fixes,
            baseline=args.baseline, write_baseline=args.write_baseline, progress=tick,
            plain_render=None if command_line_settings(args) or args.config or args.exclude or args.unsafe_fixes
            else _render_outputs))
    finally:
        stop()
    if args.diff:
        # Only the diff on stdout (`--diff > fix.patch` is a patch), as Ruff: exit 1 when there is one.
        sys.stdout.write(result.diff)
        _print_warnings(result, args.verbose)
        return EXIT_FINDINGS if result.diff else EXIT_CLEAN
    if args.add_noqa is not None:
        from dtype_lint.cli_modes import add_noqa_mode

        return add_noqa_mode(result, args.add_noqa)
    if args.write_baseline:
        _print_writes(result, args.verbose, skip=("baseline",))
        _print_warnings(result)
        print(f"dtype-lint: wrote baseline {args.write_baseline}: {plural(result.baselined, 'finding')} recorded; "
              f"`--baseline {args.write_baseline}` hides {'it' if result.baselined == 1 else 'them'}", file=sys.stderr)
        return EXIT_CLEAN
    if args.fix_only:
        if result.fixed:
            print(f"Fixed {plural(len(result.fixed), 'finding')}.")
    else:
        _report(result, args)
    if args.show_fixes:
        from dtype_lint.cli_modes import show_fixes

        show_fixes(result, args)
    _print_writes(result, args.verbose)
    _print_warnings(result, args.verbose)
    return _exit_code(args, bool(result.findings) and not args.fix_only, bool(result.fixed))


def _render_outputs(*answer):
    """fast_path.render_outputs, imported when a run keeps answers (RunOptions.plain_render)."""
    from dtype_lint.fast_path import render_outputs

    return render_outputs(*answer)


def _check_combinations(args) -> None:
    from dtype_lint.run.pipeline import UserError

    if args.add_noqa is not None:
        clash = [flag for flag, on in (("--fix", args.fix), ("--fix-only", args.fix_only), ("--diff", args.diff),
                                       ("--write-baseline", args.write_baseline)) if on]
        if clash:
            raise UserError(f"--add-noqa cannot be combined with {clash[0]}: it suppresses findings, "
                            "it does not fix them")
        if "\n" in args.add_noqa or "\r" in args.add_noqa:
            raise UserError("--add-noqa: the reason must be one line")
    if args.stdin_filename is not None and args.paths not in (None, [], ["-"]):
        raise UserError("--stdin-filename names the text on stdin: give no other path (or `-`)")


def _print_writes(result, verbose: bool = False, skip: tuple[str, ...] = (), show: tuple[str, ...] = ()) -> None:
    """What a run changed in the user's files, on stderr, cwd-relative: fixes, the helper and its
    package markers, suppressions added. Bookkeeping (the cache, `-o` reports, baselines, which
    announce themselves) only with -v."""
    bookkeeping = {"cache", "report", "baseline"} - set(show)
    for write in result.writes:
        if write.why in skip or (write.why in bookkeeping and not verbose):
            continue
        if write.why == "cache" and not write.path.endswith("/"):
            continue
        what = "created" if write.action == "created" else "wrote"
        shown = _printable(_from_cwd(result.config.root, write.path))
        print(f"dtype-lint: {what} {shown} ({write.why})", file=sys.stderr)


def _report(result, args) -> None:
    import io

    from dtype_lint.run.pipeline import safe_read

    report = io.StringIO()  # written to the named file, or not used
    out = report if args.output_file else sys.stdout
    _render(result.findings, result.fixed, args, len(result.files), result.analyzed, result.elapsed_s, safe_read, out)
    if args.output_file:
        _write_named_file(result, args.output_file, report.getvalue(), "report")


def environment_problem() -> str | None:
    """What in the environment makes any run impossible (a deleted current folder: every
    relative path, the project root and the cache hang off it), or None."""
    try:
        os.getcwd()
    except OSError as error:
        return (f"the current folder cannot be reached ({error.strerror or error}; "
                "deleted while this shell was in it?): cd to an existing folder and run again")
    return None


def _check_named_file(path: str | None, flag: str = "", cfg=None, paths=(), baseline=None,
                      folder: bool = False) -> None:
    """A report file the user named must be writable before a run starts, not after it has
    rewritten files, and must not be one of the run's inputs (run/outputs.py)."""
    from dtype_lint.core.writer import target_problem
    from dtype_lint.run.outputs import check_output
    from dtype_lint.run.pipeline import UserError

    if path and cfg is not None and (problem := check_output(path, flag, cfg, paths=paths, baseline=baseline,
                                                            folder=folder)):
        raise UserError(problem)
    if path and not folder and (problem := target_problem(path)):
        raise UserError(problem)


def _write_named_file(result, path: str, text: str, why: str) -> None:
    from dtype_lint.core.writer import WriteError
    from dtype_lint.run.outputs import check_output
    from dtype_lint.run.pipeline import UserError

    if problem := check_output(path, "", result.config, paths=result.files):
        raise UserError(problem)
    try:
        result.writer.write(path, text.encode("utf-8"), why, outside_ok=True)
    except WriteError as error:
        raise UserError(str(error)) from None


def _migrate(args) -> int:

    from dtype_lint.migrate.migration import print_summary, render_report, run_migration
    from dtype_lint.run.pipeline import UserError
    from dtype_lint.run.progress import progress_bar

    if not Path(args.path).exists():
        raise UserError(f"{args.path}: no such file or directory")
    cfg = _config(args, [args.path])
    if args.report is None and not args.series:
        args.report = "dtype-lint-migration.md"
    if args.report is not None:
        _check_named_file(args.report, "--report", cfg, [args.path])
    if args.series:
        _check_named_file(args.series, "--series", cfg, [args.path], folder=True)
    tick, stop = progress_bar(args.no_progress)
    try:
        if args.series:
            return _series(args, cfg, tick)
        from dtype_lint.migrate.migration import recheck
        from dtype_lint.run.memory_cache import RunStore

        store = RunStore()  # the fixing run's per-file results, for the re-check below
        result = run_migration(cfg, args.path, unsafe_fixes=args.unsafe_fixes, jobs=args.jobs, progress=tick,
                               store=store)
        # The report counts what a fresh check of the migrated tree finds, not the fixing run's account.
        result.findings = recheck(cfg, args.path, result, None, args.jobs, store)
    finally:
        stop()
    report = render_report(args.path, result, args.report)
    try:
        _write_named_file(result, args.report, report, "report")
    except UserError as error:
        # The tree is already rewritten: the report must not be lost with the error.
        sys.stdout.write(report)
        print(f"dtype-lint: error: {error}; the report is printed above", file=sys.stderr)
        return EXIT_ERROR
    print_summary(result, args.report)
    _print_writes(result, show=("report",))
    _print_warnings(result)
    return EXIT_FINDINGS if result.findings else EXIT_CLEAN


def _series(args, cfg, tick) -> int:
    from dtype_lint.migrate.conventions import IdentityError
    from dtype_lint.migrate.migration import migration_series, render_report
    from dtype_lint.run.pipeline import UserError

    try:
        result, patches, files = migration_series(
            cfg, args.path, args.series, args.group_by, unsafe_fixes=args.unsafe_fixes, jobs=args.jobs,
            progress=tick, convention=args.convention, author=args.author, signoff=args.signoff)
    except IdentityError as error:
        raise UserError(str(error)) from None
    if args.report is not None:
        _write_named_file(result, args.report, render_report(args.path, result, series=True), "report")
    from dtype_lint.migrate.series_folder import apply_command

    for file in files:
        print(file)
    # The exact files, never `DIR/*.patch`: the folder may hold patches of the user's own.
    print(f"dtype-lint: {len(files)} patches in {args.series}"
          + (f"; apply them in order with `{apply_command(files)}`; {args.series}/PR.md describes them as one "
             "pull request" if files else ""), file=sys.stderr)
    # One rule for both modes: what a fresh check of the migrated result leaves.
    return EXIT_FINDINGS if result.findings else EXIT_CLEAN


def _doctor(args) -> int:
    from dtype_lint.doctor import diagnose, render

    cfg = _config(args, args.paths)
    configured = copy.deepcopy(cfg)  # as the file and the flags set it, before the run infers anything
    result, matches = diagnose(cfg, args.paths, use_cache=not args.no_cache)
    # `--exclude` extends the file's list rather than setting it (load_for_run).
    command_line = frozenset(command_line_settings(args)) | ({"exclude"} if args.exclude else frozenset())
    sys.stdout.write(render(result, matches, command_line, configured))
    return EXIT_CLEAN


def _clean(args) -> int:
    from dtype_lint.core.safe_read import byte_size
    from dtype_lint.run.cache_clean import clean
    from dtype_lint.run.cache_folder import cache_folder_problem
    from dtype_lint.run.pipeline import UserError

    cfg = _config(args, [args.path])
    problem = cache_folder_problem(cfg.root, cfg.cache_dir)
    if problem is not None:
        raise UserError(problem)
    folder = Path(cfg.root) / cfg.cache_dir
    shown = _printable(_from_cwd(cfg.root, cfg.cache_dir))
    if not folder.exists():
        print(f"dtype-lint: no cache at {shown}", file=sys.stderr)
        return EXIT_CLEAN
    removed, kept = clean(folder)
    size = byte_size(removed)
    if not kept:
        print(f"dtype-lint: removed the cache at {shown} ({size})", file=sys.stderr)
    else:
        names = ", ".join(kept[:3]) + (", ..." if len(kept) > 3 else "")
        print(f"dtype-lint: removed dtype-lint's files from {shown} ({size}) and kept the folder: it holds "
              f"{len(kept)} entr{'y' if len(kept) == 1 else 'ies'} that dtype-lint did not make ({names})",
              file=sys.stderr)
    return EXIT_CLEAN


def _rule(args) -> int:
    from dtype_lint.core.findings import ENGINE_CODES
    from dtype_lint.rules import ALL_RULES, RULES_BY_CODE
    from dtype_lint.run.pipeline import UserError

    if args.all or not args.code:
        from dtype_lint.reporters.rule_metadata import rule_summary

        for r in ALL_RULES:
            print(f"{r.code}  {r.name:<28} {rule_summary(r)}")
        for c in ENGINE_CODES.values():
            print(f"{c.code}  {c.name:<28} {c.summary}")
        return EXIT_CLEAN
    rule = RULES_BY_CODE.get(args.code.upper())
    if rule is None:
        raise UserError(f"unknown rule `{args.code}`; `dtype-lint rule --all` lists them")
    print(rule_doc(rule))
    return EXIT_CLEAN


def _server() -> int:
    try:
        from dtype_lint.server import serve
    except ImportError as error:
        print(f"dtype-lint: error: `server` needs pygls, in the `lsp` extra: {_extra_install('lsp')} ({error})",
              file=sys.stderr)
        return EXIT_ERROR
    return serve()


def _extra_install(extra: str) -> str:
    """How to install an extra of this very installation: the package is on no index, so from
    the checkout it was installed from when that is known, else from a checkout."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        direct = distribution("dtype-lint").read_text("direct_url.json") or ""
    except PackageNotFoundError:
        direct = ""
    import json

    try:
        url = json.loads(direct).get("url", "") if direct else ""
    except ValueError:
        url = ""
    if url.startswith("file://"):
        from urllib.parse import unquote, urlparse

        return f"pip install -e '{unquote(urlparse(url).path)}[{extra}]'"
    return f"pip install -e '.[{extra}]' in a checkout of dtype-lint"


def _verify(argv: list[str]) -> int:
    try:
        from dtype_lint.kernels_ref.harness.verify import main as verify_main
    except ImportError as error:
        install = (f"`verify` needs torch (the CPU build: see docs/install.md), in the `verify` extra: "
                   f"{_extra_install('verify')}")
        if any(a in ("-h", "--help") for a in argv):
            # Help must not need the heavy dependency: say what the command does and how to get it.
            print("usage: dtype-lint verify [options]\n\n"
                  "Prove on reference kernels (PyTorch, CPU) that the MLA prefill fix changes nothing but the "
                  "crash: the original and the fixed code run over every storage format of kv_b_proj.\n\n"
                  f"{install}; its options are listed here once torch is installed.\n(not available: {error})")
            return EXIT_CLEAN
        print(f"dtype-lint: error: {install} ({error})", file=sys.stderr)
        return EXIT_ERROR
    return int(verify_main(argv) or 0)
