"""`json`: the machine contract other tools and tests rely on. Does not import rich.

    {"version": 1,
     "summary": {"files", "analyzed", "findings", "fixable", "fixed", "elapsed_s"},
     "findings": [{"code", "message", "path", "line", "col", "end_line", "end_col",
                   "confidence", "scope", "expression",
                   "evidence": [{"message", "path", "line"}],
                   "fix": null | {"description", "applicability": "safe" | "unsafe",
                                  "unsafe_reason", "edits": [{"start", "end", "text"}],
                                  "imports": [[module, name]]},
                   "no_fix_reason"}]}

Keys in exactly this order, findings by (path, line, col, code), indent 2, ASCII-escaped.
summary.findings counts the findings listed (not those fixed in this run); summary.fixable those
of them with any fix, safe or unsafe (Finding.fixable); elapsed_s is rounded to milliseconds.
Columns are 1-based characters, end exclusive; edit offsets are character offsets into the file.
"""

from __future__ import annotations

import json
from typing import TextIO

from dtype_lint.core.findings import Finding
from dtype_lint.reporters import RunSummary
from dtype_lint.reporters._common import RenderContext, remaining, tally

SCHEMA_VERSION = 1


def finding_dict(f: Finding) -> dict:
    fix = None
    if f.fix is not None:
        fix = {
            "description": f.fix.description,
            "applicability": "safe" if f.fix.safe else "unsafe",
            "unsafe_reason": f.fix.unsafe_reason,
            "edits": [{"start": e.start, "end": e.end, "text": e.text} for e in f.fix.edits],
            "imports": [[module, name] for module, name in f.fix.imports],
        }
    return {
        "code": f.code,
        "message": f.message,
        "path": f.path,
        "line": f.span.line,
        "col": f.span.col,
        "end_line": f.span.end_line,
        "end_col": f.span.end_col,
        "confidence": f.confidence,
        "scope": f.scope,
        "expression": f.expression,
        "evidence": [{"message": e.message, "path": e.path, "line": e.line} for e in f.evidence],
        "fix": fix,
        "no_fix_reason": f.no_fix_reason,
    }


def report(findings: list[Finding], summary: RunSummary) -> dict:
    left = remaining(findings)
    t = tally(findings, summary)
    return {
        "version": SCHEMA_VERSION,
        "summary": {
            "files": summary.files_checked,
            "analyzed": summary.files_analyzed,
            "findings": len(left),
            "fixable": t.with_fix,
            "fixed": t.fixed,
            "elapsed_s": round(float(summary.elapsed_s), 3),
        },
        "findings": [finding_dict(f) for f in left],
    }


def render(findings: list[Finding], summary: RunSummary, out: TextIO, ctx: RenderContext) -> None:
    json.dump(report(findings, summary), out, indent=2)
    out.write("\n")
