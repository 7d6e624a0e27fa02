"""A rule's page names an ecosystem's backends through the ecosystems' passages (#35): the rule
module's docstring holds `{{name}}` slots, reporters/rule_metadata.py fills them from the registry's
`rule_words` role, and every page comes out whole (docs/rules/ is compared byte for byte by
tests/test_docs.py)."""

from __future__ import annotations

import sys

import pytest

from dtype_lint.ecosystems import registry
from dtype_lint.reporters.rule_metadata import fill_passages, rule_doc
from dtype_lint.rules import ALL_RULES


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda rule: rule.code)
def test_every_slot_of_a_page_is_filled(rule):
    raw = sys.modules[rule.__module__].__doc__ or ""
    page = rule_doc(rule)
    assert "{{" not in page and "}}" not in page
    if "{{" in raw:  # the slots' words come from an ecosystem, not from the rule module
        assert page != f"# {raw}"


def test_a_slot_takes_the_first_ecosystems_passage():
    passages = registry.plugin("vllm", "rule_words").PASSAGES
    assert fill_passages("dtype=L.{{model_dtype}}") == f"dtype=L.{passages['model_dtype']}"
    assert fill_passages("no slot {here}") == "no slot {here}"


def test_a_slot_no_ecosystem_fills_is_an_error():
    with pytest.raises(KeyError, match="no_such_passage"):
        fill_passages("see {{no_such_passage}}")
