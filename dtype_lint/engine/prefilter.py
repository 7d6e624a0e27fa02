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
    """Each distinct pattern is searched on its own, after a plain substring test for the literal
    text it cannot match without (`.weight` in `=\\s*[\\w.]+\\.weight\\s*$`): one alternation of
    all of them made the regex engine try every `.` and `=` of every file, twice as slow."""

    def __init__(self, rules):
        self.markers = tuple(sorted({r.marker for r in rules}))
        patterns = list(dict.fromkeys(p for r in rules for p in r.patterns))
        self._searches = [(required_literal(p), re.compile(p, re.M).search) for p in patterns]

    def might_match(self, text: str) -> bool:
        if not self._searches or not any(m in text for m in self.markers):
            return False
        return any(literal in text and search(text) is not None for literal, search in self._searches)


def required_literal(pattern: str) -> str:
    """The longest run of plain characters every match of `pattern` contains ("" if unsure)."""
    try:
        try:
            from re import _parser as sre_parse
            from re._constants import LITERAL
        except ImportError:  # Python 3.10
            import sre_parse  # type: ignore[no-redef]
            from sre_constants import LITERAL  # type: ignore[no-redef]
        parsed = sre_parse.parse(pattern, re.M)
    except Exception:  # noqa: BLE001 - a private module: never let it break a run
        return ""
    if parsed.state.flags & re.IGNORECASE:
        return ""
    best = run = ""
    for op, arg in parsed:  # the top-level sequence: every item is in every match, in order
        run = run + chr(arg) if op is LITERAL else ""
        if len(run) > len(best):
            best = run
    return best


def has_suppression(text: str) -> bool:
    """Could the text hold a dtype-lint suppression comment that DTL902 may report (so the file
    is analysed even without a site)? Substring tests only: linear. A bare `# noqa` is never
    reported, so it does not count here (it does once the file has findings: see
    suppressions.might_hold_suppression)."""
    lowered = text.lower()
    return "dtype-lint" in lowered or ("dtl" in lowered and "noqa" in lowered)


@lru_cache(maxsize=16)
def for_rules(rules: tuple) -> Prefilter:
    """The prefilter of these rules (a tuple of Rule classes), built once."""
    return Prefilter(rules)


def might_match(text: str) -> bool:
    """The prefilter of every rule."""
    from dtype_lint.rules import ALL_RULES

    return for_rules(ALL_RULES).might_match(text)
