"""Code that never runs: a site there is no finding, whatever the layer.

`if TYPE_CHECKING:` bodies are read by type checkers only (sglang's `kimi_k3.py` declares typed
stubs of its layers there). New predicates live here rather than in the guard engine
(analysis/guards.py): they do not depend on the layer, only on where the site stands.
"""

from __future__ import annotations

import ast

from dtype_lint.analysis.class_index import dotted


def _type_checking(test: ast.expr) -> bool:
    return (dotted(test) or "").rsplit(".", 1)[-1] == "TYPE_CHECKING"


def never_runs(site: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """The site is inside the body of an `if TYPE_CHECKING:` (not its `else`)."""
    child, node = site, parents.get(id(site))
    while node is not None:
        if isinstance(node, ast.If) and _type_checking(node.test) and any(child is s for s in node.body):
            return True
        child, node = node, parents.get(id(node))
    return False
