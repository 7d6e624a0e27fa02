"""The guard's reports: JSON and SARIF in the shapes `dtype-lint check` writes, so that CI and
editors show run-time and static findings side by side, and whether a static run reports each
site's line."""

from __future__ import annotations

import functools
import linecache
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dtype_lint.core.findings import Finding
    from dtype_lint.guard.site import GuardSite

SCHEMA_VERSION = 1
# SARIF's automationDetails id: a code-scanning upload of the guard's log does not replace the
# static run's (GitHub keys uploads by tool and category).
SARIF_CATEGORY = "dtype-lint/guard/"


@functools.lru_cache(maxsize=256)
def static_findings(path: str) -> frozenset[tuple[int, str]] | None:
    """(line, code) of what `dtype-lint check PATH` reports, with the configuration it would find
    (the nearest pyproject.toml); None when the file cannot be checked. No cache is written."""
    from dtype_lint.api import check_paths
    from dtype_lint.core.config import load_for_run

    if not os.path.isfile(path):
        return None
    try:
        config = load_for_run([path])
        result = check_paths([path], config, use_cache=False)
    except Exception:  # noqa: BLE001 - a bad configuration there: the answer is "unknown"
        return None
    return frozenset((finding.span.line, finding.code) for finding in result.findings)


def static_reported(site: "GuardSite") -> bool | None:
    found = static_findings(site.path)
    if found is None:
        return None
    return (site.line, site.rule) in found


def site_finding(site: "GuardSite") -> "Finding":
    """The site as a finding of its static rule, spanning its line."""
    from dtype_lint.core.findings import Finding, Span

    text = linecache.getline(site.path, site.line).rstrip("\n")
    indent = len(text) - len(text.lstrip())
    return Finding(code=site.rule or "DTL001", message=f"run time: {site.message}", path=site.path,
                   span=Span(site.line, indent + 1, site.line, max(len(text), indent) + 1),
                   scope=site.function, expression=f"{site.kind} {site.layer_path or ''} {site.storage}",
                   no_fix_reason="found at run time by the guard: `dtype-lint check --fix` fixes what it reports")


def site_dict(site: "GuardSite", occurrences: int) -> dict:
    return {"path": site.path, "line": site.line, "function": site.function, "kind": site.kind,
            "layer_path": site.layer_path, "layer_class": site.layer_class, "quantizer": site.quantizer,
            "storage": site.storage, "rule": site.rule, "static_reported": site.static_reported,
            "occurrences": occurrences, "message": site.message}


def guard_json(sites: list["GuardSite"], occurrences: dict) -> dict:
    """{"version", "tool", "summary": {"sites", "static_reported"}, "sites": [...], "findings": [...]}:
    `findings` holds the same records as `dtype-lint check --output-format json`."""
    from dtype_lint.reporters.json_report import finding_dict

    ordered = sorted(sites, key=lambda site: (site.path, site.line, site.kind))
    return {
        "version": SCHEMA_VERSION,
        "tool": "dtype-lint guard",
        "summary": {"sites": len(ordered), "static_reported": sum(1 for site in ordered if site.static_reported)},
        "sites": [site_dict(site, occurrences.get((site.path, site.line, site.kind), 1)) for site in ordered],
        "findings": [finding_dict(site_finding(site)) for site in ordered],
    }


def guard_sarif(sites: list["GuardSite"]) -> dict:
    """SARIF 2.1.0 as `check --output-format sarif` writes it, one result per site, each with its
    run-time facts in `properties`, and its own automation category."""
    from dtype_lint.reporters import ENGINE_RULES, RunSummary
    from dtype_lint.reporters._common import RenderContext
    from dtype_lint.reporters.rule_metadata import rule_infos
    from dtype_lint.reporters.sarif import log

    # `log` lists results in Finding.sort_key order (a stable sort): sorting the pairs by it first
    # keeps each result beside its site.
    pairs = sorted(((site_finding(site), site) for site in sites), key=lambda pair: pair[0].sort_key())

    def read_source(path: str) -> str | None:
        with open(path, encoding="utf-8") as handle:
            return handle.read()

    context = RenderContext(read_source=read_source, rules={**ENGINE_RULES, **rule_infos()})
    summary = RunSummary(files_checked=len({site.path for site in sites}), files_analyzed=0, elapsed_s=0.0)
    document = log([finding for finding, _site in pairs], summary, context)
    run = document["runs"][0]
    run["automationDetails"] = {"id": SARIF_CATEGORY}
    for result, (_finding, site) in zip(run["results"], pairs):
        result["properties"].update({"source": "run time", "kind": site.kind, "layerPath": site.layer_path,
                                     "layerClass": site.layer_class, "quantizer": site.quantizer,
                                     "storage": site.storage, "staticReported": site.static_reported})
    return document
