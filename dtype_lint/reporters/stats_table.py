"""`--statistics`: a table of counts per code instead of the per-finding listing.

Columns: code, name, count, fixable. Rows by count (most first), then code. "fixable" counts
findings whose fix `--fix` applies now; "(+N unsafe)" adds those waiting for --unsafe-fixes.
Used for the human formats (text, concise); the summary line follows the table.
"""

from __future__ import annotations

from typing import TextIO

from rich import box
from rich.table import Table
from rich.text import Text

from dtype_lint.core.findings import Finding
from dtype_lint.reporters import RunSummary
from dtype_lint.reporters._common import (
    RenderContext,
    fix_applicable,
    remaining,
    summary_line,
    tally,
)
from dtype_lint.reporters._console import make_console


def rows(findings: list[Finding], unsafe_fixes_enabled: bool) -> list[tuple[str, int, int, int]]:
    """(code, count, fixable now, hidden unsafe) per code, most frequent first."""
    per: dict[str, list[int]] = {}
    for finding in findings:
        counts = per.setdefault(finding.code, [0, 0, 0])
        counts[0] += 1
        if fix_applicable(finding, unsafe_fixes_enabled):
            counts[1] += 1
        elif finding.fix is not None:
            counts[2] += 1
    return sorted(((code, found, fixable, hidden) for code, (found, fixable, hidden) in per.items()),
                  key=lambda r: (-r[1], r[0]))


def render(findings: list[Finding], summary: RunSummary, out: TextIO, ctx: RenderContext) -> None:
    console = make_console(out, ctx.color)
    left = remaining(findings)
    if left:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        table.add_column("Code", style="bold red", no_wrap=True)
        table.add_column("Name", no_wrap=True)
        table.add_column("Count", justify="right")
        table.add_column("Fixable", justify="right")
        for code, count, fixable, hidden in rows(left, summary.unsafe_fixes_enabled):
            fix_cell = str(fixable) + (f" (+{hidden} unsafe)" if hidden else "")
            table.add_row(code, ctx.rule(code).name, str(count), fix_cell)
        console.print(table)
        console.print()
    if summary.quiet:
        return
    t = tally(findings, summary)
    style = "bold green" if t.remaining == 0 else "bold"
    console.print(Text(summary_line(t), style=style), soft_wrap=True)
