"""One parse per file per run: the trees of the files parsed last, shared by every consumer.

A file analysed in a run is also read by other analyses for its class bodies (class facts), its
helper-shaped functions (helper facts) and its predicates; each used to parse it again (vLLM
0.27.1: 806 whole-module parses of 659 texts). `parse(path, text)` returns the tree already made
for that very text, else parses and keeps it among the last few (a bounded number of bytes of
source, so that a tree ten times larger does not keep ten times the trees). Trees are shared
read-only: no consumer changes one. `clear()` at the end of a run lets them go.
"""

from __future__ import annotations

import ast
from collections import OrderedDict

# Source bytes whose trees are kept: a tree costs about 60 times its source (a 100 KB module's is
# about 6 MB), so this bounds the store near 200 MB only for pathological inputs and near a few
# dozen MB on real trees (their shared files are small).
MAX_KEPT_CHARS = 1 << 20
MAX_KEPT_FILES = 8

_kept: "OrderedDict[str, tuple[str, ast.Module]]" = OrderedDict()
_chars = 0
parses = 0  # whole-module parses made here (benchmarks and tests read it)


def parse(path: str, text: str) -> ast.Module:
    """The tree of `text` (the content of `path`); raises what `ast.parse` raises."""
    global _chars, parses
    hit = _kept.get(path)
    if hit is not None and hit[0] == text:
        _kept.move_to_end(path)
        return hit[1]
    tree = ast.parse(text, filename=path)
    parses += 1
    if hit is not None:
        _chars -= len(hit[0])
    _kept[path] = (text, tree)
    _kept.move_to_end(path)
    _chars += len(text)
    while _kept and (_chars > MAX_KEPT_CHARS or len(_kept) > MAX_KEPT_FILES):
        _, (old, _) = _kept.popitem(last=False)
        _chars -= len(old)
    return tree


def clear() -> None:
    global _chars
    _kept.clear()
    _chars = 0
