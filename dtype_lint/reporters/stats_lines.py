"""`--statistics`: Ruff's line format, one line per code, most frequent first::

    2<TAB>DTL001<TAB>[*] storage-dtype-cast
    1<TAB>DTL003<TAB>[ ] storage-dtype-outside-storage

count (right-aligned), code, `[*]` when `--fix` would fix every finding of the code now (`[-]`
for some of them, `[ ]` for none) and the rule's name, tab-separated as Ruff prints them. No
colour, no rich import: this is the format scripts and CI logs read. The closing summary line
follows unless `-q`. The rich table (`stats_table`) is `--statistics=table`, and what a
terminal gets by default.
"""

from __future__ import annotations

from typing import TextIO

from dtype_lint.core.findings import Finding
from dtype_lint.reporters import RunSummary
from dtype_lint.reporters._common import RenderContext, remaining, summary_line, tally
from dtype_lint.reporters.stats_table import rows


def lines(findings: list[Finding], unsafe_fixes_enabled: bool, name_of) -> list[str]:
    table = rows(remaining(findings), unsafe_fixes_enabled)
    if not table:
        return []
    width = max(len(str(count)) for _, count, _, _ in table)
    code_width = max(len(code) for code, *_ in table)
    out = []
    for code, count, fixable, _hidden in table:
        mark = "[*]" if fixable == count else ("[-]" if fixable else "[ ]")
        out.append(f"{count:>{width}}\t{code:<{code_width}}\t{mark} {name_of(code)}")
    return out


def render(findings: list[Finding], summary: RunSummary, out: TextIO, ctx: RenderContext) -> None:
    for line in lines(findings, summary.unsafe_fixes_enabled, lambda code: ctx.rule(code).name):
        out.write(line + "\n")
    if not summary.quiet:
        out.write(summary_line(tally(findings, summary)) + "\n")
