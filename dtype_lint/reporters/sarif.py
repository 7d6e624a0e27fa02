"""`sarif`: SARIF 2.1.0 for code-scanning UIs (GitHub, VS Code SARIF viewer).

- ``tool.driver.rules``: every rule given to the reporter plus any other code found (engine
  codes DTL900-902 only when they occur), by id, each with name, shortDescription, ``help``
  (the rule's whole documentation, text and markdown: no link to resolve) and a default level;
- one result per finding: ruleId/ruleIndex, level (error, or warning for low confidence and
  unused suppressions), the primary location, ``relatedLocations`` from the evidence chain
  (message-only when the evidence has no file, e.g. configuration),
  ``partialFingerprints`` (the same stable hash as the GitLab report) and properties
  (confidence, scope, expression, noFixReason);
- ``fixes`` for fixable findings with edits: one artifactChange with a replacement per edit.
  ``deletedRegion`` uses 1-based line/column (``columnKind: unicodeCodePoints``, i.e.
  characters) converted from the edits' character offsets through `read_source`; when the
  source is unavailable the region falls back to ``charOffset``/``charLength``. The imports a
  fix needs (Fix.imports) are placed by the fixer, not by edits, so they are listed in the fix's
  description and in ``properties.imports``; applicability is in ``properties``.

URIs are the paths as given (relative to the current folder, as every format names them),
percent-encoded, with ``/`` separators, each with ``uriBaseId: "%SRCROOT%"``; the run's
``originalUriBaseIds`` gives ``%SRCROOT%`` as the current folder's ``file://`` URI, so that a
viewer resolves them wherever the log is opened (absolute paths become ``file://`` URIs of their
own, without a base). Does not import rich.
"""

from __future__ import annotations

import json
from pathlib import PurePath
from typing import TextIO
from urllib.parse import quote

from dtype_lint import __version__
from dtype_lint.core.findings import Evidence, Finding
from dtype_lint.reporters import RunSummary
from dtype_lint.reporters._common import (
    RenderContext,
    fingerprints,
    level,
    remaining,
)

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
FINGERPRINT_KEY = "dtypeLint/v1"


SRCROOT = "%SRCROOT%"


def artifact_location(path: str) -> dict:
    uri = artifact_uri(path)
    return {"uri": uri} if uri.startswith("file:") else {"uri": uri, "uriBaseId": SRCROOT}


def srcroot_uri() -> str:
    import os

    return PurePath(os.getcwd()).as_uri().rstrip("/") + "/"


def artifact_uri(path: str) -> str:
    p = PurePath(path)
    if p.is_absolute():
        return p.as_uri()
    posix = p.as_posix()
    return quote(posix[2:] if posix.startswith("./") else posix, safe="/")


def _region(f: Finding) -> dict:
    s = f.span
    return {
        "startLine": s.line,
        "startColumn": s.col,
        "endLine": s.end_line,
        "endColumn": s.end_col,
    }


def _related(i: int, ev: Evidence) -> dict:
    # Evidence from configuration has no file (or no line): SARIF locations may be message-only,
    # and a region's startLine must be >= 1.
    loc: dict = {"id": i, "message": {"text": ev.message}}
    if ev.path:
        physical: dict = {"artifactLocation": artifact_location(ev.path)}
        if ev.line > 0:
            physical["region"] = {"startLine": ev.line}
        loc["physicalLocation"] = physical
    return loc


def _fix(f: Finding, ctx: RenderContext) -> dict | None:
    fix = f.fix
    if fix is None or not fix.edits:
        return None  # SARIF requires at least one replacement per artifactChange
    src = ctx.source(f.path)
    if src is not None and any(e.end > len(src.text) or e.start > e.end for e in fix.edits):
        return None  # the edits do not belong to this text: better no fix than a wrong one
    replacements = []
    for edit in sorted(fix.edits, key=lambda e: (e.start, e.end)):
        if src is not None:
            start_line, start_col = src.position(edit.start)
            end_line, end_col = src.position(edit.end)
            region = {
                "startLine": start_line,
                "startColumn": start_col,
                "endLine": end_line,
                "endColumn": end_col,
            }
        else:
            region = {"charOffset": edit.start, "charLength": edit.end - edit.start}
        replacements.append({"deletedRegion": region, "insertedContent": {"text": edit.text}})
    description = fix.description
    if fix.imports:
        names = ", ".join(f"`from {m} import {n}`" for m, n in fix.imports)
        description += f" (also adds {names})"
    props: dict = {"applicability": "safe" if fix.safe else "unsafe"}
    if fix.unsafe_reason:
        props["unsafeReason"] = fix.unsafe_reason
    if fix.imports:
        props["imports"] = [[m, n] for m, n in fix.imports]
    return {
        "description": {"text": description},
        "artifactChanges": [
            {"artifactLocation": artifact_location(f.path), "replacements": replacements}
        ],
        "properties": props,
    }


def log(findings: list[Finding], summary: RunSummary, ctx: RenderContext) -> dict:
    left = remaining(findings)
    codes = sorted(set(ctx.given_codes) | {f.code for f in left})
    index = {code: i for i, code in enumerate(codes)}
    rules = []
    for code in codes:
        info = ctx.rule(code)
        rule: dict = {"id": code}
        if info.name:
            rule["name"] = info.name
        rule["shortDescription"] = {"text": info.summary or info.name or code}
        if info.doc:  # the documentation itself: a repo path would not resolve for the reader
            rule["help"] = {"text": info.doc, "markdown": info.doc}
        rule["defaultConfiguration"] = {"level": "warning" if code == "DTL902" else "error"}
        rules.append(rule)

    results = []
    for f, fp in zip(left, fingerprints(left)):
        result: dict = {
            "ruleId": f.code,
            "ruleIndex": index[f.code],
            "level": level(f),
            "message": {"text": f.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": artifact_location(f.path),
                        "region": _region(f),
                    }
                }
            ],
        }
        if f.evidence:
            result["relatedLocations"] = [
                _related(i, ev) for i, ev in enumerate(f.evidence, start=1)
            ]
        fix = _fix(f, ctx)
        if fix is not None:
            result["fixes"] = [fix]
        result["partialFingerprints"] = {FINGERPRINT_KEY: fp}
        props = {"confidence": f.confidence}
        if f.scope:
            props["scope"] = f.scope
        if f.expression:
            props["expression"] = f.expression
        if f.no_fix_reason:
            props["noFixReason"] = f.no_fix_reason
        result["properties"] = props
        results.append(result)

    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "dtype-lint",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "rules": rules,
                    }
                },
                "originalUriBaseIds": {SRCROOT: {"uri": srcroot_uri()}},
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }


def render(findings: list[Finding], summary: RunSummary, out: TextIO, ctx: RenderContext) -> None:
    json.dump(log(findings, summary, ctx), out, indent=2)
    out.write("\n")
