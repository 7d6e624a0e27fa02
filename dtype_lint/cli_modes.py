"""The modes of `dtype-lint check` that Ruff users know, beyond a plain run: stdin
(`--stdin-filename`), `--add-noqa` and `--show-fixes`. Kept out of cli.py, which every command
shares; the flags themselves are declared there."""

from __future__ import annotations

import os
import sys

from dtype_lint.cli_output import (
    EXIT_CLEAN,
    EXIT_FINDINGS,
    _config,
    _exit_code,
    _print_warnings,
    _printable,
    _render,
    plural,
    rule_infos,
)


def check_stdin(args) -> int:
    """`cat a.py | dtype-lint check - --stdin-filename pkg/a.py` (Ruff's stdin mode): the text is
    judged as that file of its project; `--fix` prints the fixed text, `--diff` its diff; the
    report goes to stdout, or to stderr when stdout carries the fixed text."""
    import time

    from dtype_lint.run.buffer import display_path, open_buffer
    from dtype_lint.run.pipeline import UserError

    if args.write_baseline or args.baseline or args.changed_since or args.add_noqa is not None:
        raise UserError("stdin mode takes no --baseline, --write-baseline, --changed-since or --add-noqa")
    started = time.perf_counter()
    filename = args.stdin_filename or "stdin.py"
    from dtype_lint.core.source import READ_ERRORS, FileText

    try:
        text = FileText.decode(sys.stdin.buffer.read()).text
    except READ_ERRORS as error:
        raise UserError(f"cannot read stdin as Python source: {error}") from None
    cfg = _config(args, [filename] if os.path.exists(filename) else ["."])
    buffer = open_buffer(filename, cfg, use_cache=not args.no_cache)
    fixing = (args.fix or args.fix_only) and not args.diff
    if buffer.excluded and cfg.force_exclude:
        if fixing:
            sys.stdout.write(text)
        return EXIT_CLEAN
    if fixing or args.diff:
        outcome = buffer.fix(text, args.unsafe_fixes)
        if outcome.error:
            raise UserError(f"{display_path(filename)}: {outcome.error}")
        if args.diff:
            sys.stdout.write(outcome.diff())
            return EXIT_FINDINGS if outcome.changed else EXIT_CLEAN
        sys.stdout.write(outcome.text)
        left, fixed = outcome.remaining, outcome.applied if outcome.changed else []
        missing = buffer.helper_to_create(fixed)
        if missing is not None:
            print(f"dtype-lint: warning: the fixed text imports `{missing.func}` from `{missing.module}`, whose file "
                  f"{_printable(display_path(str(missing.path)))} does not exist yet; `dtype-lint check --fix` "
                  "creates it", file=sys.stderr)
        if not args.fix_only and left:
            _render(left, fixed, args, 1, 1, time.perf_counter() - started, lambda p: outcome.text, sys.stderr)
        return _exit_code(args, bool(left) and not args.fix_only, bool(fixed))
    found = buffer.findings(text)
    _render(found, [], args, 1, 1, time.perf_counter() - started, lambda p: text, sys.stdout)
    return _exit_code(args, bool(found), False)


def add_noqa_mode(result, reason: str) -> int:
    """Write a suppression for every remaining finding (see engine.add_noqa)."""
    from dtype_lint.core.source import MAX_SOURCE_BYTES, READ_ERRORS, FileText, read_bytes
    from dtype_lint.core.writer import WriteError
    from dtype_lint.run.add_noqa import add_noqa
    from dtype_lint.run.pipeline import UserError

    by_path: dict[str, list] = {}
    for finding in result.findings:
        by_path.setdefault(finding.path, []).append(finding)
    added = 0
    for path, found in sorted(by_path.items()):
        try:
            data = read_bytes(path, MAX_SOURCE_BYTES)
            file = FileText.decode(data)
        except READ_ERRORS:
            continue
        text, count = add_noqa(file.text, found, reason)
        if not count:
            continue
        try:
            result.writer.write(path, file.encode(text), "suppression", expect=data)
        except WriteError as error:
            raise UserError(str(error)) from None
        added += count
    result.writer.close()
    print(f"Added {plural(added, 'suppression')} ({'`# dtype-lint: ignore[...]`' if reason else '`# noqa`'}).",
          file=sys.stderr)
    _print_warnings(result)
    return EXIT_CLEAN


def show_fixes(result, args) -> None:
    """Ruff's `--show-fixes`: per file, how many of each code were fixed (or can be)."""
    from dtype_lint.run.pipeline import selected

    names = {code: info.name for code, info in _all_rule_infos().items()}
    if result.fixed:
        listed, title = result.fixed, f"Fixed {plural(len(result.fixed), 'finding')}:"
    else:
        listed = [f for f in result.findings if selected(f, args.unsafe_fixes)]
        title = f"{len(listed)} {'fix' if len(listed) == 1 else 'fixes'} available with `--fix`:"
    if not listed:
        print("No fixes available." if not (args.fix or args.fix_only) else "No fixes applied.")
        return
    print(title)
    by_path: dict[str, dict[str, int]] = {}
    for f in listed:
        by_path.setdefault(f.path, {}).setdefault(f.code, 0)
        by_path[f.path][f.code] += 1
    for path in sorted(by_path):
        print(f"- {_printable(path)}:")
        for code, count in sorted(by_path[path].items()):
            print(f"    {count} \u00d7 {code} ({names.get(code, code)})")


def _all_rule_infos() -> dict:
    from dtype_lint.reporters import ENGINE_RULES

    return {**ENGINE_RULES, **rule_infos()}
