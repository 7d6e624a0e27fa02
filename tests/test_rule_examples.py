"""Every rule's own VALID/INVALID examples (Fixit style), so adding a rule never touches this file.

Each example runs with its rule alone selected (unless its settings select otherwise): a rule's
examples specify that rule, and a new rule never changes another rule's examples.
What each example must do: tests/rule_examples_check.py (shared with the scenario files under
tests/rules/, the longer programs a rule is tested on beyond the examples its module shows).
"""

from __future__ import annotations

import re
import sys

import pytest
from rule_examples_check import assert_invalid, assert_passes_prefilter, assert_valid

from dtype_lint.rules import ALL_RULES

# `dtype-lint rule CODE` prints the docstring; ruff's page layout (What it does / Why is this bad / Example / Fix safety).
DOC_SECTIONS = ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix safety",
                "## Known limits", "## Options")


def _examples(kind: str):
    return [pytest.param(rule, example, id=f"{rule.code}-{kind.lower()}-{i}")
            for rule in ALL_RULES for i, example in enumerate(getattr(rule, kind))]


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
    assert_valid(rule, example)


@pytest.mark.parametrize("rule,example", _examples("INVALID"))
def test_invalid(rule, example):
    assert_invalid(rule, example)


@pytest.mark.parametrize("rule,example", _examples("INVALID"))
def test_invalid_examples_pass_the_prefilter(rule, example):
    assert_passes_prefilter(example)
