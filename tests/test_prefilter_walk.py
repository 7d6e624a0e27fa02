"""Patterns that start with one literal (`.weight`) are walked together, in one pass over its
places (core/prefilter.Prefilter._any_from): each answer must be the pattern's own search's, and
the prefilter's verdict the one of searching every pattern on its own."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from dtype_lint.core.prefilter import AssignedFirst, LiteralFirst, Prefilter, marker_words, searched
from dtype_lint.rules import ALL_RULES

# Texts made of the weight-site patterns' own pieces: matches, near misses, an `=` far from the
# name, several `.weight` to walk.
PIECES = st.sampled_from([
    ".weight", ".weight.dtype", ".weight )", ".weight[", "= self.proj", "=", " = w", "x", " ", "\n",
    "dtype", ".", "(", ")", "getattr(m, 'weight'", "parameters()", "params_dtype", "# c", "é", "\t",
])
TEXTS = st.lists(PIECES, max_size=30).map("".join)


def _searched_alone(rules, text: str) -> bool:
    """The prefilter's verdict with each pattern searched on its own."""
    for rule in rules:
        if any(marker in text for marker in marker_words(rule)):
            if any(re.compile(p, re.M).search(text) for p in rule.patterns):
                return True
    return False


@settings(max_examples=600, deadline=None)
@given(TEXTS)
def test_walked_together_as_searched_alone(text: str):
    rules = tuple(ALL_RULES)
    assert Prefilter(rules).might_match(text) == _searched_alone(rules, text)
    seen: dict[str, bool] = {}
    for rule in rules:  # as file_analysis tests each rule, sharing what was searched
        assert Prefilter((rule,)).might_match(text, (seen, {})) == _searched_alone((rule,), text)
    for pattern, found in seen.items():
        assert found == (re.compile(pattern, re.M).search(text) is not None), pattern


@settings(max_examples=600, deadline=None)
@given(TEXTS)
def test_found_at_walks_as_search(text: str):
    walkers = {p for rule in ALL_RULES for p in rule.patterns if isinstance(searched(p)[1], LiteralFirst | AssignedFirst)}
    for pattern in walkers:
        searcher = searched(pattern)[1]
        at, verdict = text.find(searcher.first), None
        while at >= 0 and verdict is None:
            if searcher.opens(text, at) is not None:
                verdict = searcher.found_at(text, at)
            at = text.find(searcher.first, at + 1)
        assert bool(verdict) == (searcher.search(text) is not None), pattern


def test_the_weight_patterns_share_a_walk():
    firsts = [searched(p)[1].first for rule in ALL_RULES for p in rule.patterns
              if isinstance(searched(p)[1], LiteralFirst | AssignedFirst)]
    assert firsts.count(".weight") >= 4
