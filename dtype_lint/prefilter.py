"""The cheap text test run on every file before any parsing (DESIGN.md §7).

Every DTL001 site spells the weight access in one of four ways: `.weight.dtype`, `.to(L.weight)`,
`getattr(L, "weight"...)`, or an alias `w = L.weight` later used as `w.dtype`. A file with none of
them cannot hold a site and is never parsed. tests/test_rule_examples.py checks that every INVALID
example of every rule passes this filter, so a new rule form cannot be silently filtered out.
"""

from __future__ import annotations

import re

_SITE = re.compile(
    r"\.weight\s*\.\s*dtype"  # L.weight.dtype
    r"|\.weight\s*\)"  # .to(L.weight), getattr(...).weight)
    r"|getattr\([^,()]+,\s*[\"']weight[\"']"  # getattr(L, "weight"[, None])
    r"|=\s*[\w.]+\.weight\s*$",  # w = L.weight   (then w.dtype)
    re.M,
)


def might_match(text: str) -> bool:
    return "weight" in text and _SITE.search(text) is not None
