"""`github`: GitHub Actions workflow commands, one annotation per finding.

    ::error file=PATH,line=L,col=C,endLine=EL,endColumn=EC,title=dtype-lint (CODE)::MESSAGE

`::warning` for low-confidence findings and unused suppressions. Escaping follows
@actions/core: data (the message) escapes %, CR, LF; property values additionally escape : and ,.
No summary line: anything else on stdout would be noise in the job log. Does not import rich.
"""

from __future__ import annotations

from typing import TextIO

from dtype_lint.core.findings import Finding
from dtype_lint.reporters import RunSummary
from dtype_lint.reporters._common import RenderContext, level, remaining


def escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(s: str) -> str:
    return escape_data(s).replace(":", "%3A").replace(",", "%2C")


def command(f: Finding) -> str:
    props = [
        ("file", f.path),
        ("line", str(f.span.line)),
        ("col", str(f.span.col)),
        ("endLine", str(f.span.end_line)),
        ("endColumn", str(f.span.end_col)),
        ("title", f"dtype-lint ({f.code})"),
    ]
    joined = ",".join(f"{k}={escape_property(v)}" for k, v in props)
    return f"::{level(f)} {joined}::{escape_data(f.message)}"


def render(findings: list[Finding], summary: RunSummary, out: TextIO, ctx: RenderContext) -> None:
    for finding in remaining(findings):
        out.write(command(finding) + "\n")
