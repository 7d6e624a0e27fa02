"""The prefilter asks only whether a rule pattern matches somewhere in a text (core/prefilter.found_in):
a pattern starting with a literal, or with an assigned name (`=\\s*[\\w.]+`) before one, is matched
where the literal stands. Its answers must be re's, whatever the text."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from dtype_lint.core.prefilter import ASSIGNED, found_in, leading_literal, required_literal
from dtype_lint.rules import ALL_RULES

PATTERNS = list(dict.fromkeys(p for rule in ALL_RULES for p in rule.patterns))
# The patterns' own pieces, so that matches and near misses (an `=` too far, a call between the
# name and `.weight`, `==`) are common.
PIECES = st.sampled_from(["=", "==", " ", "\n", "a", "self", ".", ".weight", "[", "(", ")", "getattr(", ",", "'weight'",
                          "dtype", ".dtype", ".to(", "parameters()", "get_base_layer()", ".data", "é", "#", "_"])


@settings(max_examples=400, deadline=None)
@given(st.lists(PIECES, max_size=30).map("".join))
def test_found_in_answers_as_re_searches(text: str):
    for pattern in PATTERNS:
        _, found = found_in(pattern)
        assert found(text) == (re.compile(pattern, re.M).search(text) is not None), (pattern, text)


def test_the_weight_site_patterns_take_the_literal_paths():
    assert leading_literal(r"\.weight\s*\)") == ".weight"
    assert leading_literal(r"\.(?:to|type)\(") == ".t"  # re's parse: the branches' common start
    assert leading_literal(r"a|b") == "" and required_literal(r"(?i)weight") == ""
    assert any(p.startswith(ASSIGNED) for p in PATTERNS)


def test_an_assignment_is_the_last_equals_before_the_name():
    _, found = found_in(ASSIGNED + r"\.weight\s*$")
    assert found("w = self.proj.weight\n")
    assert found("w ==\n  proj.weight  \n")  # spaces, a line feed among them, after the `=`
    assert not found("w = f(x).weight\n")  # a call between: the `=` before it is not the name's
    assert not found("w = proj.weight.t()\n")  # the literal stands, the rest does not match
    assert not found("f(proj.weight)\nw = 1\n")  # an `=` after it only
    assert not found(".weight\n")  # no `=` at all
