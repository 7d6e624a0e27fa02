"""A rule pattern starting with a literal, or with an assigned name (`=\\s*[\\w.]+`) or a call's first
argument (`f(self.proj`) before one, is matched where `str.find` finds the literal
(core/prefilter.LiteralFirst, AssignedFirst, HandedFirst): the
prefilter and the site spans read its matches, which must be re's, whatever the text."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from dtype_lint.core.prefilter import (
    ASSIGNED,
    HANDED,
    AssignedFirst,
    HandedFirst,
    LiteralFirst,
    leading_literal,
    searched,
)
from dtype_lint.rules import ALL_RULES

PATTERNS = list(dict.fromkeys(p for rule in ALL_RULES for p in rule.patterns))
# The patterns' own pieces, so that matches and near misses (an `=` too far, a call between the
# name and `.weight`, `==`, two names in one) are common.
PIECES = st.sampled_from(["=", "==", " ", "\n", "a", "self", ".", ".weight", "[", "(", ")", "getattr(", ",", "'weight'",
                          "dtype", ".dtype", ".to(", "parameters()", "get_base_layer()", ".data", "é", "#", "_",
                          "f(", "self.", "rope(", "isinstance(", "a.b", "(\n "])


@settings(max_examples=400, deadline=None)
@given(st.lists(PIECES, max_size=30).map("".join))
def test_the_matches_are_re_s(text: str):
    for pattern in PATTERNS:
        plain = re.compile(pattern, re.M)
        _, fast = searched(pattern)
        assert [m.span() for m in fast.finditer(text)] == [m.span() for m in plain.finditer(text)], (pattern, text)
        assert (fast.search(text) is None) == (plain.search(text) is None), (pattern, text)


def test_the_weight_site_patterns_take_the_literal_paths():
    kinds = {type(searched(p)[1]) for p in PATTERNS}
    assert {LiteralFirst, AssignedFirst, HandedFirst} <= kinds
    assert leading_literal(r"\.(?:to|type)\(") == ".t"  # re's parse: the branches' common start...
    assert isinstance(searched(r"\.(?:to|type)\(")[1], re.Pattern)  # ...too short to be found first
    assert leading_literal(r"a|b") == ""


def test_an_assignment_is_the_last_equals_before_the_name():
    pattern = ASSIGNED + r"\.weight\s*$"
    fast, plain = AssignedFirst(pattern), re.compile(pattern, re.M)
    for text in ("w = self.proj.weight\n", "w ==\n  proj.weight  \n"):  # spaces and a line feed after the `=`
        assert fast.search(text).span() == plain.search(text).span() == (text.rindex("="), len(text))
    assert fast.search("w = f(x).weight\n") is None  # a call between: the `=` before it is not the name's
    assert fast.search("w = proj.weight.t()\n") is None  # the literal stands, the rest does not match
    assert fast.search("f(proj.weight)\nw = 1\n") is None  # an `=` after it only
    assert fast.search(".weight\n") is None  # no `=` at all
    assert fast.search("w = a.weight\n", 3) is None  # the `=` before the start of the search


def test_a_handed_weight_starts_at_its_callee():
    pattern = HANDED + r"\.weight\s*,"
    fast, plain = HandedFirst(pattern), re.compile(pattern, re.M)
    for text in ("y = cast(self.proj.weight, x)", "self.rope(\n    self.k.weight ,", "é(a.b.weight,"):
        assert fast.search(text).span() == plain.search(text).span()
    assert fast.search("self.rope(self.k.weight, n)").start() == 0  # `self.` is the callee's
    assert fast.search("a.rope(self.k.weight, n)") is None  # another object's method
    assert fast.search("f(layer.weight, n)") is None  # one name before `.weight`
    assert fast.search("f(g(self.k).weight, n)") is None  # a call in the chain
    assert fast.search("isinstance(self.k.weight, T)") is None  # a builtin
    assert fast.search("f(self.k.weight, n)", 1) is None  # the callee before the start of the search
