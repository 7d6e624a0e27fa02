"""`concise`: one line per finding (`path:line:col: CODE [*] message`), then the summary line.

No frames, evidence or notes. Does not import rich: colour, when wanted, is a few plain ANSI
codes (bold location, red/yellow code, cyan fix marker).
"""

from __future__ import annotations

from typing import TextIO

from dtype_lint.core.findings import Finding
from dtype_lint.reporters import RunSummary
from dtype_lint.reporters._common import (
    RenderContext,
    fixable_line,
    level,
    location,
    markers,
    remaining,
    summary_line,
    tally,
)

_RESET = "\x1b[0m"
_BOLD = "\x1b[1m"
_RED = "\x1b[1;31m"
_YELLOW = "\x1b[1;33m"
_CYAN = "\x1b[36m"
_GREEN = "\x1b[1;32m"


def line(f: Finding, unsafe_fixes_enabled: bool, color: bool = False) -> str:
    def paint(s: str, code: str) -> str:
        return f"{code}{s}{_RESET}" if color else s

    code_color = _RED if level(f) == "error" else _YELLOW
    parts = [paint(location(f) + ":", _BOLD), paint(f.code, code_color)]
    parts += [paint(t, _CYAN if t == "[*]" else _YELLOW) for t in markers(f, unsafe_fixes_enabled)]
    parts.append(f.message)
    return " ".join(parts)


def render(findings: list[Finding], summary: RunSummary, out: TextIO, ctx: RenderContext) -> None:
    color = ctx.use_color(out)
    for finding in remaining(findings):
        out.write(line(finding, summary.unsafe_fixes_enabled, color) + "\n")
    if summary.quiet:
        return
    t = tally(findings, summary)
    closing = summary_line(t)
    if color:
        closing = f"{_GREEN if t.remaining == 0 else _BOLD}{closing}{_RESET}"
    out.write(closing + "\n")
    if fixable_line(t):
        out.write(fixable_line(t) + "\n")
