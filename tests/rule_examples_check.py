"""How a rule's VALID/INVALID example is checked (Fixit style), shared by tests/test_rule_examples.py
(every rule's own examples) and the per-rule scenario files under tests/rules/ (the longer
programs a rule is tested on beyond the examples its module shows).

VALID: no findings at all. INVALID: exactly `count` findings of the rule's code, each message
containing `message_contains`; the fixed text (safe fixes, or unsafe too when `unsafe`) equals
`expected_replacement`, or the source itself when no fix is expected, in which case every finding
says why (`no_fix_reason`); fixing is idempotent and leaves nothing fixable; and the source passes
the text prefilter, so a new rule form cannot be filtered out before parsing.
"""

from __future__ import annotations

from dtype_lint.api import check_source, fix_source
from dtype_lint.core.prefilter import for_rules
from dtype_lint.rules import ALL_RULES


def settings_for(rule, example) -> dict:
    return {"select": [rule.code], **example.settings}


def _applicable(finding, unsafe: bool) -> bool:
    return finding.fix is not None and (finding.fix.safe or unsafe)


def assert_valid(rule, example) -> None:
    assert check_source(example.code, settings=settings_for(rule, example)) == []


def assert_invalid(rule, example) -> None:
    settings = settings_for(rule, example)
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


def assert_passes_prefilter(example) -> None:
    assert for_rules(ALL_RULES).might_match(example.code)
