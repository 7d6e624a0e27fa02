"""The reads of a layer's `.weight` that DTL003 judges, and whether a reduced tree may hide one.

DTL003 (`regions = "on-demand"`) reads a file's reduced tree first (core/regions.py: the
functions holding a line its patterns match are whole, other bodies blanked) and has the file
parsed whole only where a read it judges has a layer verdict there: the guard engine, which
decides most of those reads, reads the whole file.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from dtype_lint.analysis.flow.recognisers import feeds_dtype_site, weight_read
from dtype_lint.core import trees

# A `.weight` or a `getattr` however spelt: a dot, then blanks, line continuations or comments.
_ANY_WEIGHT_READ = re.compile(r"\.(?:\s|\\|#[^\n]*)*weight\b|\bgetattr\b")


def blanked_bodies(tree: ast.Module, text: str) -> Iterator[str]:
    """The text of each function body blanked in a reduced tree of `text` (none in a whole tree)."""
    for start, end in getattr(tree, trees.REMOVED, ()):
        yield text[start:end]


def blanked_may_read_weight(tree: ast.Module, text: str) -> bool:
    """Might a body blanked in the reduced tree hold a read `weight_read` recognises, one the
    rule's patterns miss (`x.\\` then `weight` on the next line)? A body that is not ASCII may spell
    `weight` in other characters (identifiers are NFKC-normalised)."""
    return any(not body.isascii() or _ANY_WEIGHT_READ.search(body) for body in blanked_bodies(tree, text))


def judged_weight_reads(ctx) -> Iterator[tuple]:
    """(candidate, node, layer) of each read of a layer's `.weight` in the candidates of `ctx` (a
    rule.RuleContext) that DTL003 judges: not one feeding a cast's or an allocation's dtype
    (DTL001/DTL002 report those), not a weight handed to a project function that casts with it,
    not a wrapper's `weight` property returning its base's (it raises exactly as the base)."""
    for function in ctx.candidates:
        for node in function.walk.of(ast.Attribute, ast.Call):  # what weight_read recognises
            layer = weight_read(node)
            if layer is None:
                continue
            if feeds_dtype_site(node, function.fn, function.parents) or _flows_on(ctx, node, function):
                continue
            if function.fn.name == "weight" and isinstance(function.parents.get(id(node)), ast.Return):
                continue
            yield function, node, layer


def _flows_on(ctx, node: ast.AST, function) -> bool:
    """The weight is handed to a project function that casts or allocates with it: DTL001/DTL002
    report the call (its message names the missing `.weight` too)."""
    call = function.parents.get(id(node))
    if isinstance(call, ast.keyword):
        call = function.parents.get(id(call))
    if not isinstance(call, ast.Call):
        return False
    return any(flow.arg is node for flow in ctx.flows.flows(call, function.scope))
