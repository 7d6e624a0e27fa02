"""The cheap text test run on every file before any parsing.

Every DTL001 site spells the attribute name `weight` next to a dtype use or a cast, so a file with
no `weight` token cannot hold one. The test is a plain substring scan plus one anchored regex,
which keeps the whole-tree floor close to the cost of reading the files (DESIGN.md §7).
"""

from __future__ import annotations

import re

# `.weight.dtype`, `getattr(L, "weight")`, `.to(L.weight)`, and an alias `w = L.weight` later
# used as `w.dtype`: all have `weight` followed by `.dtype`, a quote, or a closing paren soon after.
_SITE = re.compile(r"weight\w*[\"'\])]*\s*[.,)]")


def might_match(text: str) -> bool:
    if "weight" not in text:
        return False
    if "dtype" not in text and ".to(" not in text and ".type(" not in text:
        return False
    return _SITE.search(text) is not None
