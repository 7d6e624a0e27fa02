"""`junit`: JUnit XML for CI test-report views (Jenkins, GitLab, Azure).

One <testsuite name="dtype-lint">; one <testcase> per finding, as Ruff's junit output: name
`CODE at path:line:col`, classname the path, `file` and `line` attributes, and a <failure> whose
message is the finding's message, type its code and text `path:line:col: CODE message` with the
evidence; plus one passing summary testcase ("N files checked, M analyzed"), so a clean run
still reports a test.
Built with ElementTree (escaping), with characters XML 1.0 forbids removed. Suite time is the
run's elapsed time; no timestamps or host names, so the output is deterministic.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import TextIO

from dtype_lint.core.findings import Finding
from dtype_lint.reporters import RunSummary
from dtype_lint.reporters._common import RenderContext, evidence_location, location, plural, remaining

_XML_INVALID = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def clean(s: str) -> str:
    return _XML_INVALID.sub("\ufffd", s)


def document(findings: list[Finding], summary: RunSummary) -> ET.Element:
    left = remaining(findings)
    tests = len(left) + 1
    failures = len(left)
    elapsed = f"{float(summary.elapsed_s):.3f}"
    suites = ET.Element(
        "testsuites",
        name="dtype-lint",
        tests=str(tests),
        failures=str(failures),
        errors="0",
        time=elapsed,
    )
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="dtype-lint",
        tests=str(tests),
        failures=str(failures),
        errors="0",
        skipped="0",
        time=elapsed,
    )
    for f in left:
        case = ET.SubElement(
            suite, "testcase", name=clean(f"{f.code} at {location(f)}"), classname=clean(f.path),
            file=clean(f.path), line=str(f.span.line),
        )
        failure = ET.SubElement(case, "failure", message=clean(f.message), type=clean(f.code))
        lines = [f"{location(f)}: {f.code} {f.message}"]
        lines += [f"  {evidence_location(e.path, e.line) or 'configuration'}: {e.message}" for e in f.evidence]
        failure.text = clean("\n".join(lines) + "\n")
    checked = plural(summary.files_checked, "file")
    ET.SubElement(
        suite,
        "testcase",
        name=f"{checked} checked, {summary.files_analyzed} analyzed",
        classname="dtype-lint.summary",
        time=elapsed,
    )
    return suites


def render(findings: list[Finding], summary: RunSummary, out: TextIO, ctx: RenderContext) -> None:
    root = document(findings, summary)
    ET.indent(root, space="  ")
    out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    out.write(ET.tostring(root, encoding="unicode"))
    out.write("\n")
