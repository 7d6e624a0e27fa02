"""`gitlab`: GitLab Code Quality report (a JSON array, Code Climate issue subset).

    [{"description": "CODE message", "check_name": "CODE", "fingerprint": "<sha256>",
      "severity": "major" | "minor", "location": {"path": P, "lines": {"begin": L, "end": EL}}}]

The fingerprint hashes path + scope + code + normalised expression (no line numbers, so an
unrelated edit does not make GitLab see a "new" issue), plus an occurrence number when the same
key repeats in a file, so fingerprints are distinct. Does not import rich.
"""

from __future__ import annotations

import json
from typing import TextIO

from dtype_lint.core.findings import Finding
from dtype_lint.reporters import RunSummary
from dtype_lint.reporters._common import RenderContext, fingerprints, level, remaining

SEVERITY = {"error": "major", "warning": "minor"}


def issues(findings: list[Finding]) -> list[dict]:
    left = remaining(findings)
    return [
        {
            "description": f"{f.code} {f.message}",
            "check_name": f.code,
            "fingerprint": fp,
            "severity": SEVERITY[level(f)],
            "location": {
                "path": f.path,
                "lines": {"begin": f.span.line, "end": max(f.span.line, f.span.end_line)},
            },
        }
        for f, fp in zip(left, fingerprints(left))
    ]


def render(findings: list[Finding], summary: RunSummary, out: TextIO, ctx: RenderContext) -> None:
    json.dump(issues(findings), out, indent=2)
    out.write("\n")
