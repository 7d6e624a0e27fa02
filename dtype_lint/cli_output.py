"""What every `dtype-lint` command shares for its output: exit codes, the run's configuration from
the flags, warnings, paths as printed, the report. Apart from cli.py so that the command modes
(cli_modes.py) and the parser share it without importing each other."""

from __future__ import annotations

import os
import sys
from pathlib import Path

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _config(args, paths: list[str]):
    from dtype_lint.core.config import ConfigError, load_for_run
    from dtype_lint.run.pipeline import UserError

    try:
        return load_for_run(paths, args.config, command_line_settings(args), getattr(args, "exclude", None))
    except ConfigError as error:
        raise UserError(str(error)) from None


def command_line_settings(args) -> dict:
    """The [tool.dtype-lint] settings the command line's flags set (over the file's)."""
    overrides: dict = {}
    if getattr(args, "select", None):
        overrides["select"] = args.select
    if getattr(args, "extend_select", None):
        overrides["extend-select"] = args.extend_select
    if getattr(args, "ignore", None):
        overrides["ignore"] = args.ignore
    if getattr(args, "preset", None):
        overrides["preset"] = args.preset
    if getattr(args, "name_heuristics", False):
        overrides["name-heuristics"] = True
    if getattr(args, "line_length", None) is not None:
        overrides["line-length"] = args.line_length
    if getattr(args, "force_exclude", None) is not None:
        overrides["force-exclude"] = args.force_exclude
    return overrides


def _exit_code(args, findings_left: bool, fixed: bool) -> int:
    if args.exit_zero:
        return EXIT_CLEAN
    if findings_left or (args.exit_non_zero_on_fix and fixed):
        return EXIT_FINDINGS
    return EXIT_CLEAN


def plural(n: int, word: str) -> str:
    return f"{n} {word if n == 1 else word + 's'}"


def _print_warnings(result, verbose: bool = False) -> None:
    """Each warning once, one short line; its detail (where it has one) under it with `--verbose`."""
    details = getattr(result, "warning_details", {})
    for warning in dict.fromkeys(result.warnings):
        print(f"dtype-lint: warning: {_printable(warning)}", file=sys.stderr)
        detail = details.get(warning)
        if verbose and detail and detail != warning:
            print(f"  {_printable(detail)}", file=sys.stderr)


def _printable(text: str) -> str:
    """A path as a terminal may show it: control characters escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _from_cwd(root: Path, path: str) -> str:
    """A path the writer records relative to the project root, as every output names files:
    relative to the current folder (absolute when outside it)."""
    absolute = os.path.join(str(root), path) if not os.path.isabs(path) else path
    trailing = "/" if path.endswith("/") else ""
    rel = os.path.relpath(absolute)
    return (absolute.rstrip("/") if rel.startswith("..") else rel) + trailing


def rule_infos() -> dict:
    """Every rule's metadata for the reports (reporters/rule_metadata.py, imported when asked)."""
    from dtype_lint.reporters.rule_metadata import rule_infos as every_rule_info

    return every_rule_info()


def _render(findings, fixed, args, files: int, analyzed: int, elapsed: float, read_source, out,
            rules: dict | None = None) -> None:
    """`rules`: the rules' metadata for the report (default: every rule's, which imports them, where
    the format reads it)."""
    from dtype_lint.reporters import RunSummary, render

    summary = RunSummary(
        files_checked=files, files_analyzed=analyzed, elapsed_s=elapsed,
        fixed=len(fixed),
        fixes_available_safe=sum(1 for f in findings if f.fix and f.fix.safe),
        fixes_available_unsafe=sum(1 for f in findings if f.fix and not f.fix.safe),
        unsafe_fixes_enabled=args.unsafe_fixes, quiet=args.quiet,
    )
    color = {"always": True, "never": False}.get(args.color)
    statistics = "table" if args.statistics_table else ("lines" if args.statistics else False)
    fmt = args.output_format or "text"
    if rules is None:
        # The human listings read no rule metadata (only the statistics and SARIF do): the rules a
        # run did not enable are not imported for them.
        from dtype_lint.reporters import HUMAN_FORMATS

        rules = {} if fmt in HUMAN_FORMATS and not statistics else rule_infos()
    render(fmt, findings, summary, out, read_source=read_source, rules=rules,
           color=color, statistics=statistics)


def rule_doc(rule) -> str:
    """A rule's page (reporters/rule_metadata.py, imported when asked)."""
    from dtype_lint.reporters.rule_metadata import rule_doc as page

    return page(rule)
