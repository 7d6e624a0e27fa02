"""Every rule's own VALID/INVALID examples (Fixit style), so adding a rule never touches this file.

Each example runs with its rule alone selected (unless its settings select otherwise): a rule's
examples specify that rule, and a new rule never changes another rule's examples.
VALID: no findings at all. INVALID: exactly `count` findings of the rule's code, each message
containing `message_contains`; the fixed text (safe fixes, or unsafe too when `unsafe`) equals
`expected_replacement`, or the source itself when no fix is expected, in which case every finding
says why (`no_fix_reason`); fixing is idempotent and leaves nothing fixable. Every INVALID example
also passes the text prefilter, so a new rule form cannot be filtered out before parsing.
"""

from __future__ import annotations

import re
import sys

import pytest

from dtype_lint.api import check_source, fix_source
from dtype_lint.core.prefilter import for_rules
from dtype_lint.rules import ALL_RULES

# `dtype-lint rule CODE` prints the docstring; ruff's page layout (What it does / Why is this bad / Example / Fix safety).
DOC_SECTIONS = ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix safety",
                "## Known limits", "## Options")


def _examples(kind: str):
    return [pytest.param(rule, example, id=f"{rule.code}-{kind.lower()}-{i}")
            for rule in ALL_RULES for i, example in enumerate(getattr(rule, kind))]


def _settings(rule, example) -> dict:
    return {"select": [rule.code], **example.settings}


def _applicable(finding, unsafe: bool) -> bool:
    return finding.fix is not None and (finding.fix.safe or unsafe)


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_rule_contract(rule):
    assert re.fullmatch(r"DTL\d{3}", rule.code)
    assert rule.name and rule.summary
    assert rule.VALID and rule.INVALID, "a rule documents itself with at least one VALID and one INVALID"
    doc = sys.modules[rule.__module__].__doc__ or ""
    for section in DOC_SECTIONS:
        assert section in doc, f"{rule.code}'s docstring lacks {section!r}"


def test_rule_codes_are_unique():
    codes = [r.code for r in ALL_RULES]
    assert len(codes) == len(set(codes))


@pytest.mark.parametrize("rule,example", _examples("VALID"))
def test_valid(rule, example):
    assert check_source(example.code, settings=_settings(rule, example)) == []


@pytest.mark.parametrize("rule,example", _examples("INVALID"))
def test_invalid(rule, example):
    settings = _settings(rule, example)
    findings = check_source(example.code, settings=settings)
    assert [f.code for f in findings] == [rule.code] * example.count, [f.message for f in findings]
    for f in findings:
        for needle in example.message_contains:
            assert needle in f.message
        if not _applicable(f, example.unsafe):
            assert f.no_fix_reason or f.fix is not None, "a finding without a fix must say why"

    fixed = fix_source(example.code, settings=settings, unsafe_fixes=example.unsafe)
    if example.expected_replacement is None:
        assert fixed == example.code
        assert not any(_applicable(f, example.unsafe) for f in findings)
        return
    assert fixed == example.expected_replacement
    assert fix_source(fixed, settings=settings, unsafe_fixes=example.unsafe) == fixed
    assert not any(_applicable(f, example.unsafe) for f in check_source(fixed, settings=settings))


@pytest.mark.parametrize("rule,example", _examples("INVALID"))
def test_invalid_examples_pass_the_prefilter(rule, example):
    assert for_rules(ALL_RULES).might_match(example.code)
