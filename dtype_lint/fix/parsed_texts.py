"""One `ast` tree per text for the fixer's own checks.

A rewritten file's checks (the round's parse check, orphaned imports, `__all__`, the star
importers, the import cycle, the name check) each asked `ast.parse` for the original or the
fixed text: the original of a 100 KB module was parsed four times and the fixed text three
(issue #37). They now share one tree per text. The trees are read, never changed: every caller
here only walks them. A text that does not parse is not remembered; its caller parses it again
and gets the SyntaxError with its own file name.
"""

from __future__ import annotations

import ast
from functools import lru_cache


@lru_cache(maxsize=8)  # a file's original and its fixed texts, for the few files a worker fixes in a row
def parsed(text: str) -> ast.Module:
    """`ast.parse(text)`, shared: the caller must not change the tree."""
    return ast.parse(text)
