"""fix/bound_names.bindings asks only the node kinds that can bind a name (`_BINDING_KINDS`):
its counts are those of asking every node, on code holding every binding form and on every
Python file of this repository."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from dtype_lint.fix.bound_names import _names_of, bindings

REPO = Path(__file__).resolve().parents[1]

EVERY_FORM = """\
import a.b as c, d
from e import f as g, h
global_name = 1
x, (y, *z) = 1, (2, 3)
w: int = 0
for i in range(3):
    pass
with open("p") as (fh, other):
    pass
try:
    pass
except ValueError as error:
    pass
def fn(p, /, q, *args, r=1, **kwargs):
    global global_name
    def inner():
        nonlocal q
        q = 2
    lam = lambda s, t=1: s
    [u for u in args]
    (v := 3)
    del w
class K(Base):
    attr = 1
match subject:
    case Point(x=px) as whole:
        pass
    case [first, *rest]:
        pass
    case {"k": kv, **others}:
        pass
"""


def _every_node(tree: ast.AST) -> Counter:
    return Counter(name for n in ast.walk(tree) for name in _names_of(n, loads=False))


def test_every_binding_form_is_counted_as_every_node_counts_it():
    tree = ast.parse(EVERY_FORM)
    counts = bindings(tree)
    assert counts == _every_node(tree)
    assert {"c", "d", "g", "h", "error", "whole", "rest", "others", "px", "first", "kv", "fn", "inner", "K",
            "global_name", "q", "s", "t", "u", "v", "w"} <= set(counts)


def test_on_this_repository():
    checked = 0
    for path in sorted(REPO.joinpath("dtype_lint").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert bindings(tree) == _every_node(tree), path
        checked += 1
    assert checked > 100
