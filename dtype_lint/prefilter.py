"""The cheap text test run on every file before any parsing.

Each rule declares the spellings a file must contain for it to find anything (`Rule.patterns`,
plus its `marker` word as a plain substring test); the prefilter is their union over the enabled
rules. A file that passes none is never parsed. tests/test_rule_examples.py checks that every
INVALID example of every rule passes, so a new rule form cannot be silently filtered out.
"""

from __future__ import annotations

import re
from functools import lru_cache


class Prefilter:
    def __init__(self, rules):
        self.markers = tuple(sorted({r.marker for r in rules}))
        patterns = [p for r in rules for p in r.patterns]
        self._regex = re.compile("|".join(f"(?:{p})" for p in patterns), re.M) if patterns else None

    def might_match(self, text: str) -> bool:
        if self._regex is None or not any(m in text for m in self.markers):
            return False
        return self._regex.search(text) is not None


def has_suppression(text: str) -> bool:
    """Could the text hold a dtype-lint suppression comment? Substring tests only: linear."""
    return "dtype-lint" in text or ("DTL" in text and "noqa" in text.lower())


@lru_cache(maxsize=16)
def for_rules(rules: tuple) -> Prefilter:
    """The prefilter of these rules (a tuple of Rule classes), built once."""
    return Prefilter(rules)


def might_match(text: str) -> bool:
    """The prefilter of every rule."""
    from dtype_lint.rules import ALL_RULES

    return for_rules(ALL_RULES).might_match(text)
